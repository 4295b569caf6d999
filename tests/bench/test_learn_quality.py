"""The quality guard: validated on hand-labelled examples, and it rejects degenerate replies."""

from __future__ import annotations

import pytest

from bench.learn.quality import Embedder, QualityGuard, load_labels, surface_failure


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
