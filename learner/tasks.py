"""The Celery task `learner.tasks.train_step`: thin, late-acked, one batch per call, no-op if too few.

The work is `learner.run.run_train_step`. The DB session factory is built once per worker process
(keyed by pid, so a forked pool child never shares its parent's connections); the model stays
loaded across tasks in `learner.trainer.cached_learner`. The DB guard in `learner.versions`
keeps a second worker from training at the same time.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task, shared_task
from sqlalchemy.orm import Session, sessionmaker

from core.celery_app import TRAIN_TASK
from core.db import make_engine, make_session_factory
from core.settings import Settings
from learner.run import run_train_step

log = logging.getLogger(__name__)

SOFT_TIME_LIMIT_S = 1800  # a batch of long agent turns (32k-token prompts) on a 2-core CPU, with room
TIME_LIMIT_S = 1860


@dataclass
class WorkerResources:
    pid: int
    settings: Settings
    session_factory: sessionmaker[Session]


def resources(app: Celery) -> WorkerResources:
    """This process's settings and DB session factory, built on first use."""
    cached: WorkerResources | None = getattr(app, "_learnproxy_learner_resources", None)
    if cached is not None and cached.pid == os.getpid():
        return cached
    settings: Settings = app.conf.learnproxy_settings
    built = WorkerResources(os.getpid(), settings, make_session_factory(make_engine(settings.db_url)))
    app._learnproxy_learner_resources = built  # type: ignore[attr-defined]
    return built


@shared_task(
    name=TRAIN_TASK,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=SOFT_TIME_LIMIT_S,
    time_limit=TIME_LIMIT_S,
    ignore_result=True,
)
def train_step(self: Task, reason: str = "") -> dict[str, Any]:
    """Train one batch if a full one is ready; many queued calls collapse into few steps."""
    res = resources(self.app)
    version = run_train_step(res.session_factory, res.settings, reason=reason or "task")
    if version is None:
        return {"trained": False}
    log.info("train_step produced %s (%s)", version.name, version.state)
    return {"trained": True, "version_id": version.id, "name": version.name, "state": version.state}
