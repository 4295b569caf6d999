"""Judging one turn: a cascade of signals, the user's reaction and PRM votes, then hints.

`decide` is the cascade on a `JudgeInput`, with no database; `judge_turn` is what the Celery task
calls. It claims the turn (ready → judging), decides, asks for hints when the turn is a clear
mistake, and stores the score, every vote and the hint (→ judged or hinted) in one transaction.

Idempotent: a judged turn is a no-op, and votes are upserted by (turn_id, kind, vote_index), so a
task delivered twice never duplicates them. While a turn is `judging`, `judged_at` holds the claim
time: a claim older than `stale_after_s` belongs to a worker that died and may be taken over.
When the judge endpoint fails, the turn goes back to `ready` and the error propagates (to retry).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

from sqlalchemy import delete, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker

from core.db import session_scope
from core.models import Turn, TurnStatus, Vote, utcnow
from core.settings import Settings
from core.turns import view_of
from judges import signals
from judges.client import JudgeClient
from judges.hints import HintChoice, choose_hint, correction_words, hint_votes
from judges.prm import VoteResult, majority, prm_votes, unanimous_negative
from judges.prompts import JudgeInput, last_request, render_output
from judges.reaction import Embedder, ReactionClassifier, ReactionUnavailable, load_reaction_classifier
from judges.retry import RetryFilter

log = logging.getLogger(__name__)

DONE = (TurnStatus.judged, TurnStatus.hinted, TurnStatus.trained)
DEFAULT_STALE_S = 900.0


@dataclass
class Decision:
    score: int
    source: str  # signal, reaction, votes, none
    reason: str
    status: str = "ok"  # ok or unparsed
    votes: list[VoteResult] = field(default_factory=list)
    clear_mistake: bool = False  # a signal, a confident correction, or unanimous -1 votes
    reply_label: int | None = None  # the reaction classifier's reading of the user's reply, if it ran


@dataclass(frozen=True)
class JudgeOutcome:
    turn_id: int
    action: str  # judged, hinted, already, busy, skipped, no_next_state, missing
    score: int | None = None
    source: str | None = None


def reaction_for(settings: Settings) -> ReactionClassifier | None:
    """The cached classifier, or None (stage off, or the embedding model is not installed)."""
    if not settings.judge_reaction:
        return None
    try:
        return load_reaction_classifier(settings.data_dir / "judges")
    except ReactionUnavailable as exc:
        log.warning("reaction stage off: %s", exc)
        return None


@lru_cache(maxsize=2)
def _retry_filter(embedder: Embedder | None) -> RetryFilter | None:
    try:
        return RetryFilter(embedder or Embedder())
    except ReactionUnavailable as exc:
        log.warning("retry requests stay in correction hints: %s", exc)
        return None


def retry_filter_for(settings: Settings, reaction: ReactionClassifier | None) -> RetryFilter | None:
    """The filter for correction hints (one per process), on the reaction stage's embedder if any."""
    if not settings.hint_drop_retry:
        return None
    return _retry_filter(reaction.embedder if reaction is not None else None)


def decide(
    inp: JudgeInput, client: JudgeClient | None, settings: Settings, reaction: ReactionClassifier | None
) -> Decision:
    """The cascade; each stage runs only if switched on and only if no earlier stage decided."""
    if settings.judge_signals:
        signal = signals.detect(inp.next_state)
        if signal is not None:
            return Decision(signal.score, "signal", signal.reason, clear_mistake=True)
    reply = inp.user_reply
    label: int | None = None
    if settings.judge_reaction and reaction is not None and reply:
        found = reaction.classify(reply)
        label = found.label
        if found.score is not None:
            kind = "approval" if found.score > 0 else "correction"
            reason = f"user reply reads as {kind} (p={found.confidence:.2f})"
            return Decision(found.score, "reaction", reason, clear_mistake=found.score < 0, reply_label=label)
    if settings.judge_llm_votes and client is not None:
        votes = prm_votes(client, settings, inp)
        scores = [v.score for v in votes]
        score, status = majority(scores)
        tally = ", ".join(f"{s}:{scores.count(s)}" for s in (1, 0, -1, None) if scores.count(s))
        return Decision(score, "votes", f"votes {tally}", status, votes,
                        clear_mistake=score == -1 and unanimous_negative(scores), reply_label=label)
    return Decision(0, "none", "no stage was confident", reply_label=label)


def wants_hint_votes(decision: Decision, correction: str, settings: Settings) -> bool:
    """LLM hint votes, except for a confident correction that can serve as the hint by itself
    (`correction` is `correction_words`: "Try again." alone says nothing a teacher could use)."""
    if not settings.judge_llm_votes:
        return False
    own_words = len(correction) >= settings.hint_min_chars
    return decision.source != "reaction" or not own_words or settings.hint_votes_on_correction


def judge_turn(
    session_factory: sessionmaker[Session],
    client: JudgeClient | None,
    settings: Settings,
    turn_id: int,
    *,
    reaction: ReactionClassifier | None = None,
    stale_after_s: float = DEFAULT_STALE_S,
) -> JudgeOutcome:
    """Judge one turn and store the result; raises `JudgeError` (turn back to `ready`) to retry."""
    claimed = _claim(session_factory, turn_id, stale_after_s)
    if isinstance(claimed, JudgeOutcome):
        return claimed
    reaction = reaction if reaction is not None else reaction_for(settings)
    try:
        decision = decide(claimed, client, settings, reaction)
        hint_results: list[VoteResult] = []
        choice = HintChoice(None, None)
        if decision.clear_mistake:
            words = correction_words(claimed, settings, retry_filter_for(settings, reaction))
            if client is not None and wants_hint_votes(decision, words, settings):
                hint_results = hint_votes(client, settings, claimed)
            # the reply serves as a hint only if it does not read as approval
            choice = choose_hint(hint_results, words, settings, reply_may_correct=decision.reply_label != 1)
    except Exception:
        # endpoint down, timed out, or a soft time limit: the turn waits in `ready` for a retry
        _release(session_factory, turn_id)
        raise
    return _save(session_factory, turn_id, decision, hint_results, choice)


def _claim(factory: sessionmaker[Session], turn_id: int, stale_after_s: float) -> JudgeInput | JudgeOutcome:
    now = utcnow()
    with session_scope(factory) as session:
        turn = session.get(Turn, turn_id)
        if turn is None:
            return JudgeOutcome(turn_id, "missing")
        if turn.status in DONE or turn.status in (TurnStatus.skipped, TurnStatus.failed):
            return JudgeOutcome(turn_id, "already", turn.score, turn.score_source)
        if turn.turn_type != "main":
            turn.status = TurnStatus.skipped  # side turns are never judged
            return JudgeOutcome(turn_id, "skipped")
        if turn.next_state is None:
            return JudgeOutcome(turn_id, "no_next_state")
        if turn.status == TurnStatus.judging and not _stale(turn.judged_at, now, stale_after_s):
            return JudgeOutcome(turn_id, "busy")
        # compare-and-set on the status we read, so two workers never both claim a ready turn
        claimed = session.execute(
            update(Turn)
            .where(Turn.id == turn_id, Turn.status == turn.status)
            .values(status=TurnStatus.judging, judged_at=now)
            .execution_options(synchronize_session=False)
        )
        if claimed.rowcount != 1:  # type: ignore[attr-defined]
            return JudgeOutcome(turn_id, "busy")
        view = view_of(session, turn, with_tokens=False)
        return JudgeInput(
            request=last_request(view.messages),
            output=render_output(turn.response_text, turn.tool_calls),
            next_state=list(turn.next_state),
        )


def _stale(claimed_at: datetime | None, now: datetime, stale_after_s: float) -> bool:
    if claimed_at is None:
        return True
    if claimed_at.tzinfo is None:  # SQLite returns naive datetimes
        claimed_at = claimed_at.replace(tzinfo=now.tzinfo)
    return now - claimed_at >= timedelta(seconds=stale_after_s)


def _release(factory: sessionmaker[Session], turn_id: int) -> None:
    with session_scope(factory) as session:
        session.execute(
            update(Turn)
            .where(Turn.id == turn_id, Turn.status == TurnStatus.judging)
            .values(status=TurnStatus.ready, judged_at=None)
            .execution_options(synchronize_session=False)
        )


def _save(
    factory: sessionmaker[Session],
    turn_id: int,
    decision: Decision,
    hints: list[VoteResult],
    choice: HintChoice,
) -> JudgeOutcome:
    with session_scope(factory) as session:
        turn = session.get(Turn, turn_id)
        if turn is None or turn.status in DONE:
            return JudgeOutcome(turn_id, "already")  # another worker finished first
        upsert_votes(session, turn_id, "prm", decision.votes)
        upsert_votes(session, turn_id, "hint", hints)
        turn.score, turn.score_source, turn.score_reason = decision.score, decision.source, decision.reason
        turn.judge_status = decision.status
        turn.judged_at = utcnow()
        turn.hint, turn.hint_source = choice.hint, choice.source
        turn.status = TurnStatus.hinted if choice.hint else TurnStatus.judged
        return JudgeOutcome(turn_id, str(turn.status), decision.score, decision.source)


def upsert_votes(session: Session, turn_id: int, kind: str, votes: list[VoteResult]) -> None:
    """Insert or overwrite votes by (turn_id, kind, vote_index); drop indexes beyond this run's."""
    session.execute(
        delete(Vote).where(Vote.turn_id == turn_id, Vote.kind == kind, Vote.vote_index >= len(votes))
    )
    if not votes:
        return
    rows = [
        {"turn_id": turn_id, "kind": kind, "vote_index": v.index, "raw_text": v.raw_text, "score": v.score,
         "hint": v.hint, "judge_model": v.judge_model, "template_name": v.template_name,
         "template_version": v.template_version, "latency_ms": v.latency_ms, "created_at": utcnow()}
        for v in votes
    ]
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    stmt = insert(Vote).values(rows)
    updated = {c: getattr(stmt.excluded, c) for c in rows[0] if c not in ("turn_id", "kind", "vote_index")}
    key = ["turn_id", "kind", "vote_index"]
    session.execute(stmt.on_conflict_do_update(index_elements=key, set_=updated))
