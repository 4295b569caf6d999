"""The quality guard: validated on hand-labelled examples, and it rejects degenerate replies."""

from __future__ import annotations

import pytest

from bench.learn.content import content_of
from bench.learn.quality import REPLIES, Embedder, QualityGuard, load_labels, surface_failure


@pytest.fixture(scope="module")
def guard() -> QualityGuard:
    return QualityGuard(Embedder())


def test_labels_are_enough_and_balanced() -> None:
    labels = load_labels()
    assert len(labels) >= 40
    positives = sum(x["answers"] for x in labels)
    assert 0.3 < positives / len(labels) < 0.7


def test_threshold_generalizes_to_labels_it_was_not_fitted_on(guard: QualityGuard) -> None:
    v = guard.validation
    assert v is not None and v.n_heldout >= 20
    assert 0.0 < v.threshold < 1.0
    assert v.accuracy_heldout >= 0.9, v


@pytest.mark.parametrize(("reply", "reason"), [
    ("🍂🍁🍂🍁🍂🍁🍂🍁", "too_short"),
    ("!!! ??? ... !!! *** ###", "too_short"),
    ("leaves leaves leaves leaves leaves leaves leaves", "repetitive"),
    ("Why do leaves change colour in autumn? Why do leaves change colour?", "echo"),
    ("😀 ok 😀 so 😀 yes 😀 and 😀 no 😀 🍂🍂🍂🍂🍂🍂🍂🍂🍂", "not_text"),
    ("1. Check the leaves in the garden.\n2. Check the leaves in the garden.\n3. Check the leaves in the park.",
     "loops"),
    # numbered steps that say different things pass, however alike their numbers and openings
    ("1. Check the leaves for yellow.\n2. Check the stems for red.\n3. Check the soil for damp.", None),
])
def test_degenerate_replies_fail_before_any_model(reply: str, reason: str | None) -> None:
    assert surface_failure("Why do leaves change colour in autumn?", reply) == reason


@pytest.mark.parametrize(("reply", "reason"), [
    # what SmolLM2 wrote in the benchmark's runs: a label over a title, an offer, a self-description
    ('My advice: "The Snowy Game"', "no_answer"),
    ("My advice:\n\n* Press flowers\n* I'm a helpful AI\n", "no_answer"),
    ("I'm here to help you with your knitting needs.", "no_answer"),
    ("My advice: Planning the perfect first camping trip can be a bit overwhelming, but I'm here to help.",
     "no_answer"),
    ("I'm sorry for any confusion, but as a chatbot designed to assist with games, I'm not equipped to play.",
     "no_answer"),
    # a label and an offer around a real answer leave the answer
    ("In short, it's not a good idea.", None),
    ("I'm here to help you choose.\n\nChoose a book that aligns with your interests and preferences.", None),
    ("Score: 10/10\nCorrect, seven eights are fifty-six.", None),
    # one comma opener only: a list of words is content
    ("Flour, water, salt, yeast, sugar and time.", None),
])
def test_replies_that_say_nothing_once_labels_and_self_talk_are_set_aside(reply: str, reason: str | None) -> None:
    assert surface_failure("What should I do?", reply) == reason


def test_content_drops_repeated_labels_and_one_comma_opener() -> None:
    assert content_of("My advice: My advice: In short, use less salt.") == "use less salt."
    assert content_of("Flour, water, salt.") == "water, salt."


def test_no_answer_fails_only_replies_read_as_non_answers() -> None:
    """Every labelled reply of earlier runs that the no-answer check fails was labelled as not answering."""
    replies = load_labels(REPLIES)
    assert len(replies) >= 300 and 0.2 < sum(x["answers"] for x in replies) / len(replies) < 0.6
    failed = [x for x in replies if surface_failure(x["question"], x["reply"]) == "no_answer"]
    assert len(failed) >= 20
    assert not [x["reply"] for x in failed if x["answers"]]


def test_the_guard_reports_its_agreement_with_labelled_replies(guard: QualityGuard) -> None:
    v = guard.validation
    assert v is not None and v.replies_n == len(load_labels(REPLIES))
    assert v.replies_fail_answers <= 0.05, v  # it seldom fails a reply read as an answer
    assert 0.0 <= v.replies_pass_nonanswers <= 1.0 and 0.0 < v.replies_accuracy < 1.0


def test_relevance_separates_answers_from_off_topic_text(guard: QualityGuard) -> None:
    q = "How do bees make honey?"
    answer, off = guard.check_many([
        (q, "Bees swallow nectar, pass it between workers and fan it with their wings until it thickens."),
        (q, "The quarterly report shows revenue grew by four percent in Europe."),
    ])
    assert answer.passed and answer.reason == "ok"
    assert not off.passed and off.reason == "off_topic"
    assert answer.similarity is not None and off.similarity is not None and answer.similarity > off.similarity


def test_a_rule_compliant_grading_reply_passes(guard: QualityGuard) -> None:
    q = "Grade this answer out of 10.\nQuestion: What is the capital of Canada?\nStudent answer: Toronto"
    assert guard.check(q, "Score: 2/10\nToronto is the largest city, but the capital is Ottawa.").passed
