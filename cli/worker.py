"""`learnproxy worker`: a Celery worker for the judge and train queues, with queue housekeeping.

Besides the Celery worker itself, a maintenance thread (started once the worker is ready, so the
pool forks before it exists) re-enqueues turns left behind and deletes delivered rows from the
SQLite broker, at start and then every `--maintenance-interval` seconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import socket
import threading
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_ready

from core.celery_app import JUDGE_QUEUE, create_celery
from core.db import make_engine, make_session_factory
from core.modelload import set_torch_threads, share_threads
from core.settings import Settings

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    from judges.tasks import STALE_AFTER_S

    parser = subparsers.add_parser("worker", help="Run a Celery worker for judging and training.")
    parser.add_argument("--queues", default="judge,train", help="Comma-separated queues to consume.")
    parser.add_argument("--concurrency", type=int, default=1, help="Tasks run at once.")
    parser.add_argument("--pool", default="prefork", choices=["prefork", "solo", "threads"])
    parser.add_argument("--hostname", default=None, help="Celery node name (default judge@HOST).")
    parser.add_argument("--recover-after", type=float, default=STALE_AFTER_S,
                        help="Seconds after which a turn left `judging` is taken to have lost its worker.")
    parser.add_argument("--maintenance-interval", type=float, default=300.0,
                        help="Seconds between re-enqueues of stuck turns and broker clean-ups.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    return start_worker(
        settings,
        queues=[q.strip() for q in args.queues.split(",") if q.strip()],
        concurrency=args.concurrency,
        pool=args.pool,
        hostname=args.hostname,
        recover_after_s=args.recover_after,
        maintenance_interval_s=args.maintenance_interval,
        loglevel=logging.getLevelName(logging.getLogger().getEffectiveLevel()),
    )


def start_worker(
    settings: Settings,
    *,
    queues: list[str],
    concurrency: int = 1,
    pool: str = "prefork",
    hostname: str | None = None,
    recover_after_s: float = 720.0,
    maintenance_interval_s: float = 300.0,
    loglevel: str = "INFO",
) -> int:
    """Run a worker in this process until it is stopped; returns its exit code."""
    threads = settings.torch_threads or share_threads(concurrency)
    if pool == "prefork":  # tasks run in the forked children: each sets its share as it starts
        worker_process_init.connect(lambda **_: set_torch_threads(threads), weak=False)
    else:  # tasks run in this process
        set_torch_threads(threads)
    app = create_celery(settings)
    app.conf.include = [m for m in app.conf.include if _importable(m)]
    stop = threading.Event()
    if JUDGE_QUEUE in queues:
        def _on_ready(**_: Any) -> None:
            threading.Thread(
                target=maintenance_loop, args=(app, settings, stop),
                kwargs={"recover_after_s": recover_after_s, "interval_s": maintenance_interval_s},
                name="judge-maintenance", daemon=True,
            ).start()

        worker_ready.connect(_on_ready, weak=False)
    worker = app.Worker(
        hostname=hostname or f"judge-{'-'.join(queues)}@{socket.gethostname()}",
        queues=queues,
        concurrency=concurrency,
        pool_cls=pool,
        loglevel=loglevel,
    )
    try:
        worker.start()
    finally:
        stop.set()
    return int(worker.exitcode or 0)


def maintenance_loop(
    app: Celery, settings: Settings, stop: threading.Event, *, recover_after_s: float, interval_s: float
) -> None:
    """Re-enqueue stuck turns and purge delivered broker rows until `stop` is set."""
    from judges.maintenance import purge_delivered, requeue_ready

    engine = make_engine(settings.db_url, pool_size=1)
    factory = make_session_factory(engine)
    try:
        while True:
            try:
                purged = purge_delivered(settings.broker)
                sent = requeue_ready(factory, app, ready_after_s=interval_s, stale_after_s=recover_after_s)
                log.info("maintenance: re-enqueued %d turns, purged %d delivered messages", sent, purged)
            except Exception:  # the next round retries; one bad round must not stop housekeeping
                log.exception("judge maintenance round failed")
            if stop.wait(interval_s):
                return
    finally:
        engine.dispose()


def _importable(module: str) -> bool:
    """A judge-only node may lack `learner` (or its GPU deps); it still consumes the judge queue."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        log.warning("task module %s is not importable here; its tasks will not run on this worker", module)
    return found


def main(argv: list[str] | None = None) -> int:
    """`python -m cli.worker ...`: the same command without the rest of the CLI."""
    from core.settings import get_settings

    parser = argparse.ArgumentParser(prog="learnproxy-worker")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["worker", *(argv or [])])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.func(args, get_settings()))


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
