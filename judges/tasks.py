"""The Celery task `judges.tasks.judge_turn`: thin, idempotent, late-acked, retried with backoff.

The work is `judges.pipeline.judge_turn`. The DB engine and the judge client are built once per
worker process (lazily, keyed by pid, so a forked pool child never shares its parent's sockets)
from the settings the app was created with (`app.conf.learnproxy_settings`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task, shared_task
from sqlalchemy.orm import Session, sessionmaker

from core.celery_app import JUDGE_TASK, TRAIN_QUEUE, TRAIN_TASK
from core.db import make_engine, make_session_factory
from core.settings import Settings
from judges.client import RETRYABLE, JudgeClient
from judges.pipeline import judge_turn as judge_turn_fn

log = logging.getLogger(__name__)

SOFT_TIME_LIMIT_S = 600  # two judge rounds (votes, hints) at the default 270 s deadline, with room
TIME_LIMIT_S = 660
STALE_AFTER_S = float(TIME_LIMIT_S + 60)  # a `judging` claim older than this lost its worker


@dataclass
class WorkerResources:
    pid: int
    settings: Settings
    session_factory: sessionmaker[Session]
    client: JudgeClient


def resources(app: Celery) -> WorkerResources:
    """This process's DB session factory and judge client, built on first use."""
    cached: WorkerResources | None = getattr(app, "_learnproxy_judge_resources", None)
    if cached is not None and cached.pid == os.getpid():
        return cached
    settings: Settings = app.conf.learnproxy_settings
    built = WorkerResources(
        pid=os.getpid(),
        settings=settings,
        session_factory=make_session_factory(make_engine(settings.db_url)),
        client=JudgeClient.from_settings(settings),
    )
    app._learnproxy_judge_resources = built  # type: ignore[attr-defined]
    return built


@shared_task(
    name=JUDGE_TASK,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=SOFT_TIME_LIMIT_S,
    time_limit=TIME_LIMIT_S,
    autoretry_for=RETRYABLE,
    retry_backoff=5,  # 5 s, 10 s, 20 s ... capped below; the turn waits in `ready` meanwhile
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=20,  # after that, `requeue_ready` in the worker picks the turn up again
    ignore_result=True,
)
def judge_turn(self: Task, turn_id: int, stale_after_s: float = STALE_AFTER_S) -> dict[str, Any]:
    res = resources(self.app)
    # a redelivered message (pool child lost, or Redis's visibility timeout) means the worker that
    # claimed the turn is gone: take its claim over at once instead of waiting for it to go stale
    redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
    outcome = judge_turn_fn(res.session_factory, res.client, res.settings, int(turn_id),
                            stale_after_s=0.0 if redelivered else stale_after_s)
    log.info("turn %s: %s score=%s source=%s", turn_id, outcome.action, outcome.score, outcome.source)
    if outcome.action in ("judged", "hinted") and res.settings.auto_train and res.settings.enqueue:
        # by name: judges never imports learner
        self.app.send_task(TRAIN_TASK, kwargs={"reason": f"judged turn {turn_id}"}, queue=TRAIN_QUEUE)
    return {"turn_id": outcome.turn_id, "action": outcome.action, "score": outcome.score}
