"""The served-adapter pointer: one DB row that every proxy replica follows.

The learner publishes, a person promotes or rolls back; the proxy only reads.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.models import AdapterState, AdapterVersion, ServingPointer, utcnow


def current_version_id(session: Session) -> int | None:
    row = session.get(ServingPointer, 1)
    return row.version_id if row else None


def point_to(session: Session, version_id: int | None) -> None:
    """Move the pointer (None serves the base model). The caller commits."""
    row = session.get(ServingPointer, 1)
    if row is None:
        row = ServingPointer(id=1, version_id=version_id)
        session.add(row)
    row.version_id = version_id
    row.updated_at = utcnow()


def publish(session: Session, version_id: int) -> AdapterVersion:
    """Serve `version_id` from now on; the version it replaces is retired."""
    version = session.get(AdapterVersion, version_id)
    if version is None:
        raise KeyError(f"no adapter version {version_id}")
    if version.state not in (AdapterState.ready, AdapterState.published, AdapterState.retired,
                             AdapterState.rolled_back, AdapterState.rejected):  # a person may overrule a check
        raise ValueError(f"version {version_id} is {version.state} and cannot be served")
    previous = current_version_id(session)
    if previous is not None and previous != version_id:
        old = session.get(AdapterVersion, previous)
        if old is not None and old.state == AdapterState.published:
            old.state = AdapterState.retired
    version.state = AdapterState.published
    version.published_at = version.published_at or utcnow()
    point_to(session, version_id)
    return version


def rollback(session: Session) -> int | None:
    """Mark the served version rolled back and serve the newest earlier one (or the base model)."""
    current = current_version_id(session)
    if current is None:
        raise ValueError("nothing to roll back: the base model is served")
    version = session.get(AdapterVersion, current)
    if version is not None:
        version.state = AdapterState.rolled_back
    earlier = session.scalars(
        select(AdapterVersion)
        .where(AdapterVersion.id < current, AdapterVersion.state.in_([AdapterState.retired, AdapterState.published]))
        .order_by(AdapterVersion.id.desc())
        .limit(1)
    ).first()
    target = earlier.id if earlier else None
    if earlier is not None:
        earlier.state = AdapterState.published
    point_to(session, target)
    return target
