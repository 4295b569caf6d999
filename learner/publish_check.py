"""Checking a trained adapter version before it is served: does it still answer what users ask?

A batch can teach the student to loop ('My advice: "My advice: "My advice: …') or to meet every
request with a stock line ("You're a helpful AI, designed to provide guidance …"). Hot-swapped, such
a version serves every user until the judge has scored enough of its turns to roll it back
(learner/regression.py), and the next batch trains on from it. With `publish_check` above 0 the
learner looks first: it writes greedy replies with the new weights to the opening requests of the
latest `publish_check` sessions (distinct prompts, in the exact tokens they were served with), and
with the adapter switched off, so the base model answers the same requests. A reply
fails when it has fewer than `MIN_WORDS` words, when its word trigrams loop (`rollouts.repeated`
above `publish_check_max_repeat`), or when its relevance to the conversation's opening request
(all-MiniLM-L6-v2 cosine, `rollouts.relevance`) falls more than `publish_check_drop` below the base
reply's. The version is published only if it fails on at most `publish_check_slack` more requests
than the base model does. With `publish_check_tries` above 1, a version that fails is tried again
on weights half as far from the served version's (the LoRA matrices blended), then a quarter, and
the first that passes is published: a batch that overshoots still moves the served model a little.
If none passes, the version is kept as `rejected`: never served, its files and verdict kept for
review, and the next batch trains from the served version again.

With `publish_check_canary` above 0 the check also puts that many of the everyday requests in
`canary_prompts.txt` to the version, asked in the setting of the latest conversation (its system
messages and tools). The latest requests are what the batch has just trained on; the canary requests
were never trained on, so they show what a version does to requests it has not seen: the learning
benchmark found versions that passed on the first and looped or answered with stock lines on held-out
prompts. Each counts like any other request against the base model's failures plus the slack.
In that benchmark 16 canary requests with slack 1 refused 10 of the 12 versions whose held-out
replies fell under the quality bar, and also 6 of the 11 that held up (docs/BENCHMARKS.md, "A
canary check"): a version's failures are sparse, a few requests that tip into a loop, and 16
requests see them partly by chance. More requests, or a slack set from the base model's own
spread, would be needed to rely on it.

The base model is the anchor, not the parent, so small losses cannot add up version by version.
The check reads only what the proxy logged; it never sees how a user judged a reply, so a version
that answers well in a way users dislike passes, and the judge's scores and the rollback deal with it.
The requests are recent training traffic, often the very turns the batch learned from, so the check
sees what a version does on what it was taught more than how it generalises: in the learning
benchmark it passed versions whose held-out replies failed the quality guard on half the prompts
(docs/BENCHMARKS.md, "A check before publishing").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.models import Turn
from core.turns import view_of
from learner import rollouts
from learner.samples import asking_prompt_ids, opening_request

MIN_WORDS = 4
CANARY_FILE = Path(__file__).with_name("canary_prompts.txt")


@dataclass(frozen=True)
class Request:
    turn_id: int | None  # None for a canary request, which no user sent
    prompt_ids: list[int]
    opening: str  # the conversation's first user message, what a reply must stay about
    canary: bool = False


@dataclass(frozen=True)
class Reply:
    text: str
    repeated: float
    relevance: float | None


@dataclass(frozen=True)
class Verdict:
    passed: bool
    failed: int  # requests the new version's reply failed
    base_failed: int  # requests the base model's reply failed
    slack: int
    rows: list[dict[str, Any]]
    scale: float = 1.0  # the share of the trained step from the served version's weights that was checked
    tries: list[dict[str, float]] = field(default_factory=list)  # each scale tried, with its failures

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


SERVED = (Turn.turn_type == "main", Turn.error.is_(None), Turn.n_response_tokens > 0)


def latest_requests(session: Session, n: int) -> list[Request]:
    """Up to `n` distinct prompts: the opening main turn of each of the latest sessions, newest session
    first, counting only turns served without an error. An opening turn is a request on its own; a
    later one may be a "thanks" or a complaint, whose replies are not answers to compare."""
    if n <= 0:
        return []
    sessions = (select(func.min(Turn.id)).where(*SERVED).group_by(Turn.session_id)
                .order_by(func.max(Turn.id).desc()))
    out: list[Request] = []
    seen: set[tuple[int, ...]] = set()
    for first in session.scalars(sessions):
        if len(out) == n:
            break
        turn = session.get(Turn, first)
        assert turn is not None
        view = view_of(session, turn)
        if view.prompt_token_ids and tuple(view.prompt_token_ids) not in seen:
            seen.add(tuple(view.prompt_token_ids))
            out.append(Request(first, view.prompt_token_ids, opening_request(view.messages)))
    return out


def canary_prompts(n: int, path: Path = CANARY_FILE) -> list[str]:
    """The first `n` requests of the canary file (all of them when it holds fewer)."""
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")][:n]


def canary_requests(session: Session, tokenizer: Any, prompts: list[str]) -> list[Request]:
    """`prompts` as requests in the setting of the latest served conversation: its system messages and
    tools, then the prompt as the only user message (no setting at all before the first turn)."""
    if not prompts:
        return []
    newest = session.scalars(select(Turn).where(*SERVED).order_by(Turn.id.desc()).limit(1)).first()
    view = view_of(session, newest, with_tokens=False) if newest is not None else None
    messages, tools = (view.messages, view.tools) if view is not None else ([], None)
    return [Request(None, asking_prompt_ids(tokenizer, messages, tools, p), p, canary=True) for p in prompts]


def failure(reply: Reply, base: Reply, *, max_repeat: float, drop: float) -> str | None:
    """Why `reply` fails against the base model's reply to the same request; None when it passes."""
    if len(rollouts.words(reply.text)) < MIN_WORDS:
        return "too_short"
    if reply.repeated > max_repeat:
        return "loops"
    if reply.relevance is not None and base.relevance is not None and reply.relevance < base.relevance - drop:
        return "off_topic"
    return None


def decide(new: list[Reply], base: list[Reply], *, max_repeat: float, drop: float, slack: int,
           requests: Sequence[Request] = ()) -> Verdict:
    """Pass unless the new replies fail on more than `slack` requests beyond the base model's failures.
    A base reply is held to the loop and length tests only: it is the relevance anchor. With
    `requests` given, each row also says what was asked and whether it was a canary request."""
    rows, failed, base_failed = [], 0, 0
    asked: list[Request | None] = list(requests) or [None] * len(new)
    for mine, anchor, request in zip(new, base, asked, strict=True):
        why = failure(mine, anchor, max_repeat=max_repeat, drop=drop)
        base_why = failure(anchor, anchor, max_repeat=max_repeat, drop=drop)
        failed += why is not None
        base_failed += base_why is not None
        row = {"reply": mine.text, "base_reply": anchor.text, "failed": why, "base_failed": base_why,
               "relevance": mine.relevance, "base_relevance": anchor.relevance, "repeated": mine.repeated}
        if request is not None:
            row |= {"request": request.opening, "canary": request.canary}
        rows.append(row)
    return Verdict(failed <= base_failed + slack, failed, base_failed, slack, rows)


class Replies:
    """Greedy replies of one model to requests, with the measures `failure` reads; base replies are
    cached by prompt, since the base model's weights never change."""

    def __init__(self, model: Any, tokenizer: Any, embedder: Any, *, device: str, eos_ids: list[int],
                 max_new_tokens: int) -> None:
        self.model, self.tokenizer, self.embedder = model, tokenizer, embedder
        self.device, self.eos_ids, self.max_new_tokens = device, eos_ids, max_new_tokens
        self._base: dict[tuple[int, ...], Reply] = {}

    def of_adapter(self, requests: list[Request]) -> list[Reply]:
        return self._write(requests)

    def of_base(self, requests: list[Request]) -> list[Reply]:
        todo = [r for r in requests if tuple(r.prompt_ids) not in self._base]
        if todo:
            with self.model.disable_adapter():
                self._base.update(zip([tuple(r.prompt_ids) for r in todo], self._write(todo), strict=True))
        return [self._base[tuple(r.prompt_ids)] for r in requests]

    def _write(self, requests: list[Request]) -> list[Reply]:
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0]
        was_training = self.model.training
        self.model.eval()
        try:  # `generate` runs without gradients
            ids = rollouts.generate(self.model, [r.prompt_ids for r in requests],
                                    [self.max_new_tokens] * len(requests), eos_ids=self.eos_ids,
                                    pad_id=pad, temperature=0.0, device=self.device)
        finally:
            self.model.train(was_training)
        texts = [self.tokenizer.decode([t for t in reply if t not in self.eos_ids]).strip() for reply in ids]
        sims = rollouts.relevance(self.embedder, texts, [r.opening for r in requests])
        return [Reply(text, rollouts.repeated(text), sim) for text, sim in zip(texts, sims, strict=True)]
