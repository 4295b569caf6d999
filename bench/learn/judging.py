"""How often the judge agreed with the simulator's ground truth, read from the run's feedback DB.

The DB is opened read-only. Turns are matched to the simulator's record by session id and their
order within the session (the session's closing turn comes last and is never judged).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, select

from bench.learn.sim import Truth
from core.models import AdapterState, AdapterVersion, ServingPointer, Turn

# A 135M judge on 2 busy cores takes up to about a minute a turn (votes, then a hint request), so
# only a longer silence means the rest is not coming.
STALL_S = 150.0


def read_only(db_path: Path) -> Engine:
    """The run's SQLite DB opened read-only: the benchmark never writes behind the proxy's back."""
    return create_engine(f"sqlite:///file:{db_path}?mode=ro&uri=true", connect_args={"timeout": 30})


def _read_turns(db_path: Path, session_ids: set[str]) -> dict[str, list[Turn]]:
    if not db_path.exists() or not session_ids:
        return {}
    engine = read_only(db_path)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(Turn.session_id, Turn.turn_index, Turn.turn_type, Turn.score, Turn.score_source,
                       Turn.response_text, Turn.hint, Turn.status)
                .where(Turn.session_id.in_(sorted(session_ids)))
                .order_by(Turn.session_id, Turn.turn_index)
            ).all()
    finally:
        engine.dispose()
    by_session: dict[str, list[Any]] = {}
    for row in rows:
        if row.turn_type == "main":
            by_session.setdefault(row.session_id, []).append(row)
    return by_session  # type: ignore[return-value]


def _matched(db_path: Path, truths: list[Truth]) -> list[tuple[Truth, Any]]:
    by_session = _read_turns(db_path, {t.session_id for t in truths})
    pairs: list[tuple[Truth, Any]] = []
    for t in truths:
        turns = by_session.get(t.session_id, [])
        pairs.append((t, turns[t.ordinal] if t.ordinal < len(turns) else None))
    return pairs


def wait_for_judging(db_path: Path, truths: list[Truth], *, timeout_s: float) -> int:
    """Give the worker time to judge these turns (up to `timeout_s`); how many are still unjudged.

    Before the server stops, so the last block is judged; and before each held-out evaluation, so
    no judge vote shares the engine's batch with a held-out reply."""
    deadline = time.monotonic() + timeout_s
    last, still = -1, 0.0
    judged = 0
    while time.monotonic() < deadline:
        judged = sum(row is not None and row.score is not None for _, row in _matched(db_path, truths))
        if judged >= len(truths):
            return 0
        if judged == last:
            still += 5.0
            if still >= STALL_S:
                break
        else:
            last, still = judged, 0.0
        time.sleep(5.0)
    return len(truths) - judged


def _training_now(db_path: Path) -> int:
    engine = read_only(db_path)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(AdapterVersion.id).where(AdapterVersion.state == AdapterState.training))
            return len(rows.all())
    finally:
        engine.dispose()


def wait_for_training(db_path: Path, *, timeout_s: float, settle_s: float = 10.0) -> None:
    """Wait until no adapter version has been in training for `settle_s` (up to `timeout_s`).

    The train task follows the judge task that completed a batch, so a short quiet spell after
    judging means every full batch has been trained (a partial batch never will be).
    """
    deadline = time.monotonic() + timeout_s
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        if db_path.exists() and _training_now(db_path):
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= settle_s:
            return
        time.sleep(1.0)


def judge_agreement(db_path: Path, truths: list[Truth]) -> dict[str, Any]:
    """Agreement of the judge's score with the ground truth (+1 good, -1 bad) on training turns."""
    pairs = _matched(db_path, truths)
    confusion: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    text_mismatch = hinted = 0
    for truth, row in pairs:
        gold = "+1" if truth.good else "-1"
        if row is None:
            confusion[f"{gold}/missing"] += 1
            continue
        score = "none" if row.score is None else f"{row.score:+d}" if row.score else "0"
        confusion[f"{gold}/{score}"] += 1
        sources[row.score_source or "none"] += 1
        hinted += bool(row.hint)
        if not truth.tool_call and row.response_text.strip() != truth.response_text.strip():
            text_mismatch += 1
    n = len(pairs)
    decided = sum(v for k, v in confusion.items() if k.endswith(("/+1", "/-1")))
    agree = confusion["+1/+1"] + confusion["-1/-1"]
    return {
        "n": n,
        "decided": decided,
        "agreement": agree / n if n else None,  # 0, unjudged and missing count as disagreement
        "agreement_decided": agree / decided if decided else None,
        "gold_bad_rate": sum(not t.good for t in truths) / n if n else None,
        "confusion": dict(confusion),
        "score_source": dict(sources),
        "hinted": hinted,
        "text_mismatch": text_mismatch,  # DB text differs from what the client got: alignment is off
    }


def served_and_rolled_back(db_path: Path) -> tuple[int | None, list[dict[str, Any]]]:
    """The version the pointer serves at the end (None: the base model), and every rolled-back
    version with the check that rolled it back (learner/regression.py)."""
    if not db_path.exists():
        return None, []
    engine = read_only(db_path)
    try:
        with engine.connect() as conn:
            served = conn.execute(select(ServingPointer.version_id).where(ServingPointer.id == 1)).scalar()
            rows = conn.execute(select(AdapterVersion.id, AdapterVersion.parent_id, AdapterVersion.metrics)
                                .where(AdapterVersion.state == AdapterState.rolled_back)
                                .order_by(AdapterVersion.id)).all()
    finally:
        engine.dispose()
    return served, [{"version": r.id, "parent": r.parent_id, "check": (r.metrics or {}).get("rollback")}
                    for r in rows]


def rejected_versions(db_path: Path) -> list[dict[str, Any]]:
    """Versions the publish check kept from serving (learner/publish_check.py), with its counts."""
    if not db_path.exists():
        return []
    engine = read_only(db_path)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(AdapterVersion.id, AdapterVersion.parent_id, AdapterVersion.metrics)
                                .where(AdapterVersion.state == AdapterState.rejected)
                                .order_by(AdapterVersion.id)).all()
    finally:
        engine.dispose()
    out = []
    for r in rows:
        check = (r.metrics or {}).get("publish_check") or {}
        out.append({"version": r.id, "parent": r.parent_id, "failed": check.get("failed"),
                    "base_failed": check.get("base_failed"), "n": len(check.get("rows") or [])})
    return out
