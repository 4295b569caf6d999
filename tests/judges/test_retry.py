"""Retry requests left out of correction hints, on the real all-MiniLM-L6-v2."""

from __future__ import annotations

import pytest

from judges.reaction import Embedder
from judges.retry import RETRY_SIMILARITY, RetryFilter, load_phrasings

pytestmark = pytest.mark.slow

# Written apart from judges/data/retry_requests.txt (checked below).
RETRY = ["Go again.", "Can you redo it?", "Please rewrite it.", "Give it another go.", "Again, please.",
         "Please try again.", "Let's try once more."]
# Sentences that say what to change, some of them with a retry word in them: each must stay.
SAYS_WHAT = [
    "You buried the answer.", "Start with 'In short,' and then the answer.",
    "I only read the first line and it told me nothing.", "Open with 'In short,' and what to do.",
    "Too long, I need it in twenty-five words or fewer.", "Cut it down, I don't have time to read all that.",
    "Please drop the headings, it reads like a chatbot wrote it.", "Just write normal text.",
    "Leave it out.", "Skip the cheerful opener, just answer.", "Use a YYYY-MM-DD date.",
    "The lookup errored out, fix the arguments and try again.", "Fix it.", "Fix the bug.",
    "That is wrong, the function still crashes on empty input.", "Redo it in metres.",
    "Try again with celsius.", "Try again, but shorter.", "Do it again but keep the original headings.",
    "Once more but in French.", "The file is config.yaml, not config.yml.", "No, wrong.",
]


@pytest.fixture(scope="module")
def retry() -> RetryFilter:
    return RetryFilter(Embedder())


def test_held_out_phrasings_are_not_in_the_list() -> None:
    shipped = {p.lower().strip(".!? ") for p in load_phrasings()}
    assert not shipped & {p.lower().strip(".!? ") for p in RETRY + SAYS_WHAT}


def test_bare_retry_requests_are_told_from_sentences_that_say_what_to_change(retry: RetryFilter) -> None:
    assert retry.is_retry(RETRY) == [True] * len(RETRY)
    kept = retry.is_retry(SAYS_WHAT)
    assert [s for s, r in zip(SAYS_WHAT, kept, strict=True) if r] == []
    # the margin either side of the threshold, so a change to the list shows what it costs
    similarity = retry.embed(SAYS_WHAT) @ retry.embed(load_phrasings()).T
    assert similarity.max() < RETRY_SIMILARITY


def test_strip_keeps_the_correction_and_drops_the_request(retry: RetryFilter) -> None:
    said = "I only read the first line and it told me nothing. Open with 'In short,' and what to do."
    assert retry.without_retries(f"{said} Try again.") == said
    assert retry.without_retries("Can you redo it?\nPlease rewrite it.") == ""
    assert retry.without_retries("Too long.\nGive it another go.") == "Too long."
    # the rest keeps its line breaks and indentation (code in a correction is the hint's substance)
    code = "Still wrong. Call it like this:\n    f(1, 2)\n\nthen check the result."
    assert retry.without_retries(f"{code}\nPlease try again.") == code
    assert retry.without_retries(f"Please try again.\n{code}") == code
    assert retry.without_retries("") == "" and retry.is_retry([]) == []
