"""Bare retry requests ("Try again.", "Give it another go.") in a user's correction.

When the user's own correction serves as the hint, its retry requests say nothing about what to
change, and the hinted teacher answers them instead of the task. On bottomline's 20 training-pool
prompts (`python scripts/screen_hints.py`, SmolLM2-135M, greedy) the teacher given one of the four
corrections met the user's rule in 0.55 of replies and apologised in 0.19; given the same
corrections with a retry request after them, 0.34 and 0.33. A sentence is a retry request when its
MiniLM embedding is within `RETRY_SIMILARITY` (cosine) of a phrasing in `data/retry_requests.txt`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from pathlib import Path

import numpy as np

from judges.reaction import sentences, without_sentences

RETRY_FILE = Path(__file__).resolve().parent / "data" / "retry_requests.txt"
# tests/judges/test_retry.py holds 7 retry requests written apart from the shipped list, each at
# or over this line, and 22 sentences that say what to change, each under it (the nearest, "Try
# again, but shorter.", at 0.52).
RETRY_SIMILARITY = 0.55


def load_phrasings(path: Path = RETRY_FILE) -> list[str]:
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


class RetryFilter:
    """Drops a text's sentences that only ask for another attempt; `embed` returns unit vectors."""

    def __init__(self, embed: Callable[[list[str]], np.ndarray], threshold: float = RETRY_SIMILARITY) -> None:
        self.embed, self.threshold = embed, threshold

    @cached_property
    def _phrasings(self) -> np.ndarray:
        return self.embed(load_phrasings())

    def is_retry(self, parts: list[str]) -> list[bool]:
        if not parts:
            return []
        similarity = self.embed(parts) @ self._phrasings.T
        return [bool(row.max() >= self.threshold) for row in similarity]

    def without_retries(self, text: str) -> str:
        """The text without its retry sentences, the rest as written ("" when it held nothing else)."""
        parts = sentences(text)
        return without_sentences(text, parts, self.is_retry(parts))
