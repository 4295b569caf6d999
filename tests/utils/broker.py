"""What waits on the embedded broker (Kombu's SQLAlchemy transport on SQLite), read straight from its tables."""

from __future__ import annotations

import json

from sqlalchemy import create_engine, text

from core.settings import Settings


def queued_tasks(settings: Settings, queue: str) -> list[str]:
    """The task names of the visible (not yet taken) messages on `queue`, oldest first."""
    engine = create_engine(settings.broker.removeprefix("sqla+"))
    try:
        with engine.connect() as conn:
            payloads = [row[0] for row in conn.execute(text(
                "SELECT m.payload FROM kombu_message m JOIN kombu_queue q ON m.queue_id = q.id "
                "WHERE q.name = :queue AND m.visible = 1 ORDER BY m.id"), {"queue": queue})]
    finally:
        engine.dispose()
    return [json.loads(p)["headers"]["task"] for p in payloads]
