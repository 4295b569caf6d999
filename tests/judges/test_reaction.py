"""The reaction classifier on the real all-MiniLM-L6-v2, against phrasings it was not trained on."""

from __future__ import annotations

from pathlib import Path

import pytest

from judges.reaction import load_examples, load_reaction_classifier

pytestmark = pytest.mark.slow

# Written apart from judges/data/reactions.jsonl; none of these lines is in it (checked below).
HELD_OUT_APPROVALS = [
    "cheers, that sorted it",
    "brilliant, works perfectly now",
    "thank you, exactly right",
    "yes that's correct, thanks a bunch",
    "great stuff, the deploy went through",
    "that's perfect, thanks!",
]
HELD_OUT_CORRECTIONS = [
    "no, you got the units wrong, redo it in metres",
    "that is not what I asked, read my message again",
    "this still doesn't work, same failure as before",
    "wrong again, it's the other file",
    "you did not do what i asked",
    "incorrect, the answer is 12",
]
# Complaints about a reply's form or tone rather than its facts, some with what to do instead.
HELD_OUT_STYLE_CORRECTIONS = [
    "far too chatty, just give me the facts",
    "the email sounds rude. Soften it a bit.",
    "that's not the layout I asked for, the totals go at the top",
    "too many exclamation marks, it looks unprofessional",
    "my manager will never read something this long",
    "you switched to a different naming style halfway through",
]
# New requests in the imperative: they say what to do next, not what was wrong.
HELD_OUT_NEW_REQUESTS = [
    "Now translate the same paragraph into German.",
    "Add a second example for the edge case.",
    "Write the tests for this function next.",
]
HELD_OUT_NEUTRAL = [
    "What license is this project under?",
    "how would this look in Rust?",
]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return load_reaction_classifier(tmp_path_factory.mktemp("judges"))


def test_held_out_phrasings_are_truly_held_out() -> None:
    seen = {e["text"].lower() for e in load_examples()}
    held_out = HELD_OUT_APPROVALS + HELD_OUT_CORRECTIONS + HELD_OUT_STYLE_CORRECTIONS + HELD_OUT_NEW_REQUESTS
    for text in held_out + HELD_OUT_NEUTRAL:
        assert text.lower() not in seen


def test_the_shipped_training_set_is_large_and_varied() -> None:
    examples = load_examples()
    assert len(examples) >= 150
    by_label = {label: sum(1 for e in examples if e["label"] == label) for label in (-1, 0, 1)}
    assert min(by_label.values()) >= 30, by_label


def test_confident_decisions_on_unseen_replies_are_right(classifier) -> None:  # type: ignore[no-untyped-def]
    approvals = [classifier.classify(t) for t in HELD_OUT_APPROVALS]
    corrections = [classifier.classify(t) for t in HELD_OUT_CORRECTIONS]
    # never a confident wrong sign ...
    assert all(r.score in (1, None) for r in approvals), approvals
    assert all(r.score in (-1, None) for r in corrections), corrections
    # ... and most clear cases decided
    assert sum(r.score == 1 for r in approvals) >= 4, approvals
    assert sum(r.score == -1 for r in corrections) >= 4, corrections


def test_complaints_about_form_are_corrections_and_new_requests_are_not(classifier) -> None:  # type: ignore[no-untyped-def]
    style = [classifier.classify(t) for t in HELD_OUT_STYLE_CORRECTIONS]
    assert all(r.score in (-1, None) for r in style), style
    assert sum(r.score == -1 for r in style) >= 5, style
    requests = [classifier.classify(t) for t in HELD_OUT_NEW_REQUESTS]
    assert all(r.score is None for r in requests), requests


def test_neutral_questions_are_left_to_the_votes(classifier) -> None:  # type: ignore[no-untyped-def]
    for text in HELD_OUT_NEUTRAL:
        assert classifier.classify(text).score is None, text


def test_a_reaction_followed_by_a_new_request_is_read_from_its_first_sentence(classifier) -> None:  # type: ignore[no-untyped-def]
    # one embedding of the whole message reads mostly the new request; its first sentence is the reaction
    assert classifier.classify("thank you, exactly right. Next, can you explain how the cache expires?").score == 1
    assert classifier.classify("incorrect, the answer is 12. Please show the steps for the second part.").score == -1


def test_a_reply_with_both_signs_is_left_unclear(classifier) -> None:  # type: ignore[no-untyped-def]
    reaction = classifier.classify("Thanks! That fixed it. But the tests now fail.")
    assert reaction.score is None
    assert reaction.label == -1  # it holds a correction: it may still serve as a hint


def test_lines_are_sentences_too(classifier) -> None:  # type: ignore[no-untyped-def]
    from judges.reaction import leading_sentences

    assert leading_sentences("thanks\nnow do the same for the parser") == ["thanks", "now do the same for the parser"]


def test_the_trained_weights_are_cached_on_disk(tmp_path: Path) -> None:
    load_reaction_classifier(tmp_path)
    cached = list(tmp_path.glob("reaction-*.npz"))
    assert len(cached) == 1
    mtime = cached[0].stat().st_mtime_ns
    load_reaction_classifier.cache_clear()  # a new process: reads the file instead of training
    load_reaction_classifier(tmp_path)
    assert cached[0].stat().st_mtime_ns == mtime and len(list(tmp_path.glob("reaction-*.npz"))) == 1
