"""Housekeeping for the judge queue: re-enqueue turns nobody is judging, clean the SQLite broker.

Turns can be left behind: the judge endpoint was down until the retries ran out (the turn is back
in `ready`), the proxy could not reach the broker, or a worker died mid-task on a broker with no
redelivery (Kombu's SQLAlchemy transport marks a message delivered the moment it is fetched). The
worker runs `requeue_ready` at start and then periodically. Kombu's SQLAlchemy transport also keeps
every delivered message as a `visible=0` row forever; `purge_delivered` deletes them.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import Celery
from sqlalchemy import create_engine, or_, select, text
from sqlalchemy.orm import Session, sessionmaker

from core.celery_app import JUDGE_QUEUE, JUDGE_TASK
from core.models import Turn, TurnStatus, utcnow

log = logging.getLogger(__name__)


def stuck_turn_ids(
    session_factory: sessionmaker[Session], *, ready_after_s: float, stale_after_s: float, limit: int = 1000
) -> list[int]:
    """Main turns with a next state, `ready` for `ready_after_s`, or `judging` on a stale claim."""
    now = utcnow()
    ready_before = now - timedelta(seconds=ready_after_s)
    claimed_before = now - timedelta(seconds=stale_after_s)
    with session_factory() as session:
        return list(session.scalars(
            select(Turn.id)
            .where(Turn.turn_type == "main", Turn.next_state.is_not(None))
            .where(or_(
                (Turn.status == TurnStatus.ready)
                & or_(Turn.next_state_at.is_(None), Turn.next_state_at <= ready_before),
                (Turn.status == TurnStatus.judging)
                & or_(Turn.judged_at.is_(None), Turn.judged_at <= claimed_before),
            ))
            .order_by(Turn.id)
            .limit(limit)
        ))


def requeue_ready(
    session_factory: sessionmaker[Session], app: Celery, *, ready_after_s: float = 60.0,
    stale_after_s: float = 900.0,
) -> int:
    """Send `judge_turn` again for every stuck turn; returns how many were sent."""
    ids = stuck_turn_ids(session_factory, ready_after_s=ready_after_s, stale_after_s=stale_after_s)
    for turn_id in ids:
        app.send_task(JUDGE_TASK, args=[turn_id], kwargs={"stale_after_s": stale_after_s}, queue=JUDGE_QUEUE)
    if ids:
        log.info("re-enqueued %d turns for judging", len(ids))
    return len(ids)


def purge_delivered(broker_url: str, *, timeout_s: float = 30.0) -> int:
    """Delete delivered (`visible=0`) rows from Kombu's SQLAlchemy broker; 0 for other brokers."""
    if not broker_url.startswith("sqla+"):
        return 0
    url = broker_url.removeprefix("sqla+")
    engine = create_engine(url, connect_args={"timeout": timeout_s} if url.startswith("sqlite") else {})
    try:
        with engine.begin() as conn:
            if not engine.dialect.has_table(conn, "kombu_message"):
                return 0
            delete = text("DELETE FROM kombu_message WHERE visible = :hidden")
            result = conn.execute(delete, {"hidden": False})
            return int(result.rowcount or 0)
    finally:
        engine.dispose()
