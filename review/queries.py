"""Read the feedback DB for review, and write human labels: plain functions over a `Session`.

They return JSON-ready dicts, so the pages, the JSON API and the CLI show the same data.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from core.models import AdapterVersion, ChatSession, Label, Turn, Vote
from core.pointer import current_version_id
from core.turns import view_of
from review.filters import TurnFilters

MOVING_AVERAGE_WINDOW = 20
CHART_MAX_TURNS = 2000  # the reward chart reads at most this many recent scored turns
LABEL_VALUES = (-1, 0, 1)


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _dialect(db: Session) -> str:
    return db.get_bind().dialect.name


# --- sessions ------------------------------------------------------------------------------------


def list_sessions(db: Session, filters: TurnFilters, *, limit: int = 50, offset: int = 0) -> dict[str, Any]:
    """Sessions with at least one turn matching `filters`, newest first, with per-session counts."""
    agg = (
        filters.apply(
            select(
                Turn.session_id.label("sid"),
                func.count(Turn.id).label("n"),
                func.count(Turn.score).label("judged"),
                func.avg(Turn.score).label("mean_score"),
                func.count(Turn.hint).label("hints"),
            ),
            dialect=_dialect(db),
        )
        .group_by(Turn.session_id)
        .subquery()
    )
    total = db.scalar(select(func.count()).select_from(agg)) or 0
    rows = db.execute(
        select(ChatSession, agg.c.n, agg.c.judged, agg.c.mean_score, agg.c.hints)
        .join(agg, agg.c.sid == ChatSession.id)
        .order_by(ChatSession.last_seen_at.desc(), ChatSession.id)
        .limit(limit)
        .offset(offset)
    ).all()
    labeled = _labeled_counts(db, [r[0].id for r in rows])
    items = [
        {
            **session_summary(s),
            "n_matching": n,
            "n_judged": judged,
            "mean_score": round(float(mean), 3) if mean is not None else None,
            "n_hints": hints,
            "n_labeled": labeled.get(s.id, 0),
        }
        for s, n, judged, mean, hints in rows
    ]
    return {"total": total, "limit": limit, "offset": offset, "data": items}


def _labeled_counts(db: Session, session_ids: list[str]) -> dict[str, int]:
    if not session_ids:
        return {}
    rows = db.execute(
        select(Turn.session_id, func.count(func.distinct(Label.turn_id)))
        .join(Label, Label.turn_id == Turn.id)
        .where(Turn.session_id.in_(session_ids))
        .group_by(Turn.session_id)
    ).all()
    return {sid: n for sid, n in rows}


def session_summary(s: ChatSession) -> dict[str, Any]:
    return {
        "id": s.id,
        "source": s.source,
        "created_at": iso(s.created_at),
        "last_seen_at": iso(s.last_seen_at),
        "closed_at": iso(s.closed_at),
        "closed_reason": s.closed_reason,
        "n_turns": s.n_turns,
        "client": s.client,
    }


def session_detail(db: Session, session_id: str) -> dict[str, Any] | None:
    """A session and every turn in it, fully resolved (without token arrays)."""
    chat = db.get(ChatSession, session_id)
    if chat is None:
        return None
    turns = db.scalars(
        select(Turn)
        .where(Turn.session_id == session_id)
        .order_by(Turn.turn_index)
        .options(selectinload(Turn.votes), selectinload(Turn.labels))
    ).all()
    names = _version_names(db, {t.adapter_version_id for t in turns} | {t.trained_version_id for t in turns})
    details = [turn_detail(db, t, names=names) for t in turns]
    previous: list[Any] = []
    for t, detail in zip(turns, details, strict=True):
        detail["context_shared"] = _shared_prefix(previous, t.message_refs)
        previous = t.message_refs
    return {**session_summary(chat), "turns": details}


def _shared_prefix(a: list[Any], b: list[Any]) -> int:
    """How many leading messages two turns share (by blob hash): an agent resends the whole history,
    so the page shows only what is new since the turn before."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# --- turns ---------------------------------------------------------------------------------------


def turn_summary(t: Turn, names: dict[int, str]) -> dict[str, Any]:
    """The columns of a turn that need no blob reads."""
    return {
        "id": t.id,
        "session_id": t.session_id,
        "turn_index": t.turn_index,
        "turn_type": t.turn_type,
        "status": t.status,
        "created_at": iso(t.created_at),
        "model": t.model,
        "adapter_version": t.adapter_version_id,
        "adapter_name": names.get(t.adapter_version_id) if t.adapter_version_id else None,
        "response": t.response_text,
        "tool_calls": t.tool_calls,
        "finish_reason": t.finish_reason,
        "error": t.error,
        "score": t.score,
        "score_source": t.score_source,
        "score_reason": t.score_reason,
        "judge_status": t.judge_status,
        "hint": t.hint,
        "hint_source": t.hint_source,
        "prompt_len": t.prompt_len,
        "n_response_tokens": t.n_response_tokens,
        "timings_ms": {"queue": t.queue_ms, "ttft": t.ttft_ms, "total": t.total_ms},
    }


def vote_dict(v: Vote) -> dict[str, Any]:
    return {
        "id": v.id,
        "kind": v.kind,
        "index": v.vote_index,
        "score": v.score,
        "hint": v.hint,
        "raw_text": v.raw_text,
        "judge_model": v.judge_model,
        "template": f"{v.template_name}@{v.template_version}",
        "latency_ms": v.latency_ms,
        "created_at": iso(v.created_at),
    }


def label_dict(lab: Label) -> dict[str, Any]:
    return {
        "id": lab.id,
        "turn_id": lab.turn_id,
        "value": lab.value,
        "hint": lab.hint,
        "author": lab.author,
        "created_at": iso(lab.created_at),
    }


def turn_detail(
    db: Session, t: Turn, *, names: dict[int, str] | None = None, tokens: bool = False
) -> dict[str, Any]:
    """Everything a reviewer needs about one turn: context, output, next state, votes, labels."""
    names = names if names is not None else _version_names(db, {t.adapter_version_id, t.trained_version_id})
    view = view_of(db, t, with_tokens=tokens)
    history = sorted(t.labels, key=lambda lab: lab.id, reverse=True)
    out = {
        **turn_summary(t, names),
        "messages": view.messages,
        "tools": view.tools,
        "params": t.params,
        "next_state": t.next_state,
        "votes": [vote_dict(v) for v in t.votes if v.kind != "hint"],
        "hint_candidates": [vote_dict(v) for v in t.votes if v.kind == "hint"],
        "label": label_dict(history[0]) if history else None,
        "label_history": [label_dict(lab) for lab in history],
        "advantage": t.advantage,
        "trained_version": t.trained_version_id,
        "trained_name": names.get(t.trained_version_id) if t.trained_version_id else None,
    }
    if tokens:
        out["prompt_token_ids"] = view.prompt_token_ids
        out["response_token_ids"] = view.response_token_ids
        out["response_logprobs"] = view.response_logprobs
    return out


def get_turn(db: Session, turn_id: int) -> Turn | None:
    return db.scalars(
        select(Turn).where(Turn.id == turn_id).options(selectinload(Turn.votes), selectinload(Turn.labels))
    ).first()


def list_turns(db: Session, filters: TurnFilters, *, limit: int = 50, offset: int = 0) -> dict[str, Any]:
    """Turns matching `filters`, newest first, without blob reads."""
    base = filters.apply(select(Turn), dialect=_dialect(db))
    total = db.scalar(select(func.count()).select_from(base.subquery())) or 0
    turns = db.scalars(
        base.order_by(Turn.created_at.desc(), Turn.id.desc()).limit(limit).offset(offset)
    ).all()
    names = _version_names(db, {t.adapter_version_id for t in turns})
    return {"total": total, "limit": limit, "offset": offset, "data": [turn_summary(t, names) for t in turns]}


def add_label(db: Session, turn_id: int, *, value: int, hint: str | None, author: str) -> Label:
    """Append a label (the newest is in force). Raises KeyError for an unknown turn. Caller commits."""
    if value not in LABEL_VALUES:
        raise ValueError(f"label value must be -1, 0 or 1, got {value!r}")
    if db.get(Turn, turn_id) is None:
        raise KeyError(turn_id)
    label = Label(turn_id=turn_id, value=value, hint=(hint or "").strip() or None, author=author)
    db.add(label)
    db.flush()
    return label


def _version_names(db: Session, ids: set[int | None]) -> dict[int, str]:
    wanted = {i for i in ids if i is not None}
    if not wanted:
        return {}
    return dict(
        db.execute(select(AdapterVersion.id, AdapterVersion.name).where(AdapterVersion.id.in_(wanted))).all()
    )


# --- adapters ------------------------------------------------------------------------------------


def adapter_versions(db: Session) -> dict[str, Any]:
    """Every adapter version, newest first, with what it served and how it scored."""
    served = {
        vid: (n, judged, mean)
        for vid, n, judged, mean in db.execute(
            select(
                Turn.adapter_version_id, func.count(Turn.id), func.count(Turn.score), func.avg(Turn.score)
            ).group_by(Turn.adapter_version_id)
        ).all()
    }
    current = current_version_id(db)
    versions = db.scalars(select(AdapterVersion).order_by(AdapterVersion.id.desc())).all()
    rows = []
    for v in versions:
        n, judged, mean = served.get(v.id, (0, 0, None))
        rows.append(
            {
                "id": v.id,
                "name": v.name,
                "parent": v.parent_id,
                "state": v.state,
                "method": v.method,
                "base_model": v.base_model,
                "path": v.path,
                "n_samples": v.n_samples,
                "metrics": v.metrics,
                "config": v.config,
                "created_at": iso(v.created_at),
                "published_at": iso(v.published_at),
                "serving": v.id == current,
                "turns_served": n,
                "turns_judged": judged,
                "mean_score": round(float(mean), 3) if mean is not None else None,
            }
        )
    base_n, base_judged, base_mean = served.get(None, (0, 0, None))
    base = {
        "turns_served": base_n,
        "turns_judged": base_judged,
        "mean_score": round(float(base_mean), 3) if base_mean is not None else None,
    }
    return {"current": current, "base": base, "versions": rows}


# --- stats ---------------------------------------------------------------------------------------


def stats(db: Session, *, days: int = 30) -> dict[str, Any]:
    """Overview figures: volume per day, share judged, scores, label agreement, reward by version."""
    total = db.scalar(select(func.count(Turn.id))) or 0
    main = db.scalar(select(func.count(Turn.id)).where(Turn.turn_type == "main")) or 0
    judged = (
        db.scalar(select(func.count(Turn.id)).where(Turn.turn_type == "main", Turn.score.is_not(None))) or 0
    )
    per_day = db.execute(
        select(func.date(Turn.created_at).label("day"), func.count(Turn.id))
        .group_by("day")
        .order_by(func.date(Turn.created_at).desc())
        .limit(days)
    ).all()
    scores = dict(db.execute(select(Turn.score, func.count(Turn.id)).group_by(Turn.score)).all())
    sources = dict(
        db.execute(
            select(Turn.score_source, func.count(Turn.id))
            .where(Turn.score.is_not(None))
            .group_by(Turn.score_source)
        ).all()
    )
    return {
        "sessions": db.scalar(select(func.count(ChatSession.id))) or 0,
        "turns": total,
        "main_turns": main,
        "judged": judged,
        "judged_share": round(judged / main, 4) if main else None,
        "with_hint": db.scalar(select(func.count(Turn.id)).where(Turn.hint.is_not(None))) or 0,
        "labeled": db.scalar(select(func.count(func.distinct(Label.turn_id)))) or 0,
        "turns_per_day": [{"day": str(day), "turns": n} for day, n in reversed(per_day)],
        "score_distribution": {str(k): scores.get(k, 0) for k in (-1, 0, 1)} | {"none": scores.get(None, 0)},
        "score_sources": {str(k): v for k, v in sources.items()},
        "agreement": label_agreement(db),
        "reward_by_version": reward_moving_average(db),
        "current_version": current_version_id(db),
    }


def label_agreement(db: Session) -> dict[str, Any]:
    """How often the judge's score equals the newest human label, over turns that have both."""
    newest = select(func.max(Label.id).label("lid")).group_by(Label.turn_id).subquery()
    pairs = db.execute(
        select(Turn.score, Label.value)
        .join(Label, Label.turn_id == Turn.id)
        .join(newest, newest.c.lid == Label.id)
        .where(Turn.score.is_not(None), Turn.score_source.is_distinct_from("label"))
    ).all()
    confusion: Counter[tuple[int, int]] = Counter((s, v) for s, v in pairs if s is not None)
    agree = sum(n for (s, v), n in confusion.items() if s == v)
    return {
        "compared": len(pairs),
        "agree": agree,
        "rate": round(agree / len(pairs), 4) if pairs else None,
        "confusion": [
            {"judge": s, "label": v, "n": confusion.get((s, v), 0)}
            for s in LABEL_VALUES
            for v in LABEL_VALUES
        ],
    }


def reward_moving_average(db: Session, *, window: int = MOVING_AVERAGE_WINDOW) -> list[dict[str, Any]]:
    """Per adapter version, the moving average of score over its own scored main turns.

    x is the position among all scored turns (oldest first), so versions line up as a timeline.
    """
    rows = db.execute(
        select(Turn.adapter_version_id, Turn.score)
        .where(Turn.score.is_not(None), Turn.turn_type == "main")
        .order_by(Turn.created_at.desc(), Turn.id.desc())
        .limit(CHART_MAX_TURNS)
    ).all()
    windows: dict[int | None, deque[int]] = defaultdict(lambda: deque(maxlen=window))
    series: dict[int | None, list[list[float]]] = defaultdict(list)
    for x, (version, score) in enumerate(reversed(rows)):
        win = windows[version]
        win.append(score or 0)  # never None: the query keeps scored turns only
        series[version].append([x, round(sum(win) / len(win), 4)])
    names = _version_names(db, set(series))
    return [
        {"version": v, "name": names.get(v, f"v{v}") if v is not None else "base", "points": pts}
        for v, pts in sorted(series.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0))
    ]
