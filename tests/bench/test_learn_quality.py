"""The quality guard: validated on hand-labelled examples, and it rejects degenerate replies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.learn.content import content_of
from bench.learn.quality import REPLIES, Embedder, QualityGuard, load_labels, reply_similarities, surface_failure


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
    ('My advice: "Snowy Game"', "no_answer"),
    ("In short, I'm not sure.", "no_answer"),  # no verdict, only talk about the assistant
    ("In short, no, you shouldn't.", None),  # a verdict of three words answers
    ("My advice:\n\n* Press flowers\n* I'm a helpful AI\n", "no_answer"),
    ("I'm here to help you with your knitting needs.", "no_answer"),
    ("I'm sorry for any confusion, but as a chatbot designed to assist with games, I'm not equipped to play.",
     "no_answer"),
    # a label and an offer around a real answer leave the answer
    ("In short, it's not a good idea.", None),
    ("I'm here to help you choose.\n\nChoose a book that aligns with your interests and preferences.", None),
    ("Score: 10/10\nCorrect, seven eights are fifty-six.", None),
    # a list of words is content, and so is a clause beside the assistant's talk
    ("Flour, water, salt, yeast, sugar and time.", None),
    ("In short, yes, open on Sundays.", None),
    ("I'm not an expert, but you should boil the water first.", None),
    ("As an assistant manager, you should talk to both of them.", None),
    # only the offer goes; the remark beside it stays, and the guard cannot tell a remark from advice
    ("My advice: Planning the perfect first camping trip can be a bit overwhelming, but I'm here to help.",
     None),
])
def test_replies_that_say_nothing_once_labels_and_self_talk_are_set_aside(reply: str, reason: str | None) -> None:
    assert surface_failure("What should I do?", reply) == reason


def test_content_drops_repeated_labels_a_filler_opener_and_self_talk_clauses() -> None:
    assert content_of("My advice: My advice: In short, use less salt.") == "use less salt."
    assert content_of("Flour, water, salt.").split() == ["Flour", "water", "salt."]  # no filler opener
    assert content_of("I'm sorry to hear that, so rest.") == "so rest."


def test_reply_similarities_are_cached_per_labels_file_and_recomputed_when_unfit(tmp_path: Path) -> None:
    embedder = Embedder()
    labels = tmp_path / "labels.jsonl"
    rows = [{"question": "How do bees make honey?", "reply": "They fan nectar until it thickens.", "answers": True},
            {"question": "How do bees make honey?", "reply": "Bees are a fascinating topic.", "answers": False}]
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cache = tmp_path / "cache"
    read, first = reply_similarities(embedder, labels, cache)
    assert read == rows
    (written,) = cache.glob("answer-labels-*.json")
    assert json.loads(written.read_text()) == first and len(first) == 2
    written.write_text("[0.5]")  # a file that does not fit the labels is computed again
    assert reply_similarities(embedder, labels, cache)[1] == pytest.approx(first)
    labels.write_text(labels.read_text() + json.dumps(rows[0]) + "\n")  # new labels: a new file, the old one gone
    assert len(reply_similarities(embedder, labels, cache)[1]) == 3
    (rewritten,) = cache.glob("answer-labels-*.json")
    assert rewritten != written


def test_no_answer_fails_only_replies_read_as_non_answers() -> None:
    """Every labelled reply of earlier runs that the no-answer check fails was labelled as not answering."""
    replies = load_labels(REPLIES)
    assert len(replies) >= 300 and 0.2 < sum(x["answers"] for x in replies) / len(replies) < 0.6
    failed = [x for x in replies if surface_failure(x["question"], x["reply"]) == "no_answer"]
    assert len(failed) >= 20
    assert not [x["reply"] for x in failed if x["answers"]]


def test_the_guard_reports_its_agreement_with_labelled_replies(guard: QualityGuard) -> None:
    """The figures quality.py, keys.py and docs/BENCHMARKS.md give; should this fail, those are out of date."""
    v = guard.validation
    assert v is not None and v.replies_n == len(load_labels(REPLIES))
    plain = QualityGuard(guard.embedder, keys={}).validation
    assert plain is not None and plain.replies_n == v.replies_n
    # Without the answer keys it seldom fails an answer, but passes most on-topic non-answers.
    assert plain.replies_fail_answers <= 0.05 and plain.replies_pass_nonanswers > 0.5, plain
    # The keys turn that round: most non-answers fail, at the cost of about a quarter of the answers.
    assert v.replies_pass_nonanswers < 0.35 and v.replies_fail_answers < 0.25, v
    assert v.replies_accuracy > plain.replies_accuracy + 0.2, (v, plain)


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
