"""Adapter version rows and files: the one-run-at-a-time guard, naming, saving and publishing.

The guard is the version row itself: a run inserts its row in state `training` and commits, then
looks again. If an older live `training` row exists the newer run deletes its own row and backs
off, so two racing workers settle on one without a database-specific lock. A `training` row older
than `lock_stale_s` belongs to a dead run and is marked failed.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core import pointer
from core.db import session_scope
from core.models import AdapterState, AdapterVersion, utcnow
from core.settings import Settings
from learner.config import TrainConfig


def _aware(ts: datetime) -> datetime:
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)  # SQLite hands back naive UTC


def recover_stale(session: Session, stale_s: float) -> int:
    """Mark `training` rows older than `stale_s` failed; returns how many."""
    cutoff = utcnow() - timedelta(seconds=stale_s)
    n = 0
    for row in session.scalars(select(AdapterVersion).where(AdapterVersion.state == AdapterState.training)):
        if _aware(row.created_at) < cutoff:
            row.state = AdapterState.failed
            row.metrics = {**(row.metrics or {}), "error": "stale training lock recovered"}
            n += 1
    return n


def acquire(
    factory: sessionmaker[Session], settings: Settings, config: TrainConfig
) -> AdapterVersion | None:
    """Insert this run's `training` row (parent: see `parent_for`), or None when another runs."""
    with session_scope(factory) as session:
        recover_stale(session, config.lock_stale_s)
        row = AdapterVersion(
            name=f"pending-{uuid.uuid4().hex}",
            parent_id=parent_for(session, config.publish_check_train_on),
            state=AdapterState.training,
            base_model=settings.model,
            method=config.method,
            config=config.to_json(),
        )
        session.add(row)
        session.flush()
        # the id is the version number; the random suffix keeps engine names unique across DBs
        row.name = f"v{row.id}-{secrets.token_hex(3)}"
    with session_scope(factory) as session:
        first = session.scalars(
            select(AdapterVersion.id)
            .where(AdapterVersion.state == AdapterState.training)
            .order_by(AdapterVersion.id)
            .limit(1)
        ).first()
        if first != row.id:
            session.delete(session.get(AdapterVersion, row.id))
            return None
    return row


def parent_for(session: Session, train_on: int) -> int | None:
    """The version a new one trains from: the served one, or, with `train_on` set, the newest version when
    it was rejected and the rejected versions from it back to the served one number at most `train_on`."""
    served = pointer.current_version_id(session)
    if not train_on:
        return served
    newest = session.scalars(select(AdapterVersion.id).where(AdapterVersion.state.not_in(
        [AdapterState.training, AdapterState.failed])).order_by(AdapterVersion.id.desc()).limit(1)).first()
    rejected, grew_from = _rejected_run(session, newest)
    return newest if 0 < rejected <= train_on and grew_from == served else served


def served_ancestor(session: Session, version_id: int | None) -> int | None:
    """The nearest version at or above `version_id` that was not rejected, None for the base model: what a
    version trained on from rejected ones (`parent_for`) grew from among the weights that served."""
    return _rejected_run(session, version_id)[1]


def depth(session: Session, version_id: int | None, limit: int | None = None) -> int:
    """How many versions lie from `version_id` up its parents to the base model (0 for the base model),
    counting at most `limit` (None: all)."""
    return sum(1 for _ in islice(_lineage(session, version_id), limit))


def _rejected_run(session: Session, version_id: int | None) -> tuple[int, int | None]:
    """(how many rejected versions lie in a row from `version_id` up its parents, the first that is not)."""
    rejected = 0
    for row in _lineage(session, version_id):
        if row.state != AdapterState.rejected:
            return rejected, row.id
        rejected += 1
    return rejected, None


def _lineage(session: Session, version_id: int | None) -> Iterator[AdapterVersion]:
    """`version_id`'s row, then its parent's, up to the base model. A parent always has a lower id, so a
    hand-edited cycle ends the walk."""
    row = session.get(AdapterVersion, version_id) if version_id is not None else None
    while row is not None:
        yield row
        parent_id = row.parent_id
        row = session.get(AdapterVersion, parent_id) if parent_id is not None and parent_id < row.id else None


def write_files(path: Path, config: TrainConfig, metrics: dict[str, Any]) -> None:
    """`config.json` and `metrics.json` beside the adapter's safetensors."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config.to_json(), indent=2))
    (path / "metrics.json").write_text(json.dumps(metrics, indent=2))


def finish(
    session: Session, version_id: int, *, path: Path, metrics: dict[str, Any], n_samples: int, publish: bool
) -> AdapterVersion:
    """Mark the version ready (and published when asked). The caller commits."""
    row = session.get(AdapterVersion, version_id)
    if row is None:
        raise KeyError(f"adapter version {version_id} vanished during training")
    row.state = AdapterState.ready
    row.path = str(path)
    row.metrics = metrics
    row.n_samples = n_samples
    if publish:
        pointer.publish(session, version_id)
    return row


def fail(factory: sessionmaker[Session], version_id: int, error: str) -> None:
    """Release the guard: the row stays, as `failed`, with the error in its metrics."""
    with session_scope(factory) as session:
        row = session.get(AdapterVersion, version_id)
        if row is not None:
            row.state = AdapterState.failed
            row.metrics = {**(row.metrics or {}), "error": error[:2000]}


def release(factory: sessionmaker[Session], version_id: int) -> None:
    """Drop a `training` row that trained nothing (its number is not reused: names stay unique)."""
    with session_scope(factory) as session:
        row = session.get(AdapterVersion, version_id)
        if row is not None and row.state == AdapterState.training:
            session.delete(row)


def list_versions(session: Session) -> list[AdapterVersion]:
    return list(session.scalars(select(AdapterVersion).order_by(AdapterVersion.id)))


def find(session: Session, ref: str) -> AdapterVersion | None:
    """A version by id (`3`, `v3`) or by its engine name (`v3-a1b2c3`)."""
    by_name = session.scalars(select(AdapterVersion).where(AdapterVersion.name == ref)).first()
    if by_name is not None:
        return by_name
    digits = ref[1:] if ref.startswith("v") else ref
    return session.get(AdapterVersion, int(digits)) if digits.isdigit() else None
