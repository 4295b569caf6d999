"""The one Celery app, with a `judge` queue and a `train` queue.

The embedded default broker is Kombu's SQLAlchemy transport on SQLite in the data dir. Its polling
interval must be set on the transport class: a `polling_interval` in `broker_transport_options` is
passed on to `create_engine` and crashes it.
"""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from core.settings import Settings

JUDGE_QUEUE = "judge"
TRAIN_QUEUE = "train"
JUDGE_TASK = "judges.tasks.judge_turn"
TRAIN_TASK = "learner.tasks.train_step"


def create_celery(settings: Settings) -> Celery:
    """A Celery app for `settings`. Task modules are named by string, so nothing is imported here."""
    broker = settings.broker
    if broker.startswith("sqla+sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        from kombu.transport import sqlalchemy as kombu_sqla

        kombu_sqla.Transport.polling_interval = settings.broker_poll_interval_s
    app = Celery("learnproxy", broker=broker, include=["judges.tasks", "learner.tasks"])
    app.conf.update(
        task_queues=[Queue(JUDGE_QUEUE), Queue(TRAIN_QUEUE)],
        task_default_queue=JUDGE_QUEUE,
        task_routes={JUDGE_TASK: {"queue": JUDGE_QUEUE}, TRAIN_TASK: {"queue": TRAIN_QUEUE}},
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        # Kombu's SQLAlchemy transport passes transport options on to create_engine, which rejects them
        broker_transport_options={} if broker.startswith("sqla+") else {"visibility_timeout": 3600},
        worker_hijack_root_logger=False,
    )
    app.conf.learnproxy_settings = settings  # tasks read the settings the app was built with
    return app
