"""`learnproxy serve`: the proxy (with the review UI) and, with --with-worker, its Celery workers.

With --with-worker, one judge worker and one train worker run as child processes with the same
settings, so judging and training happen with no extra command, and a long training step never
holds up judging. `learnproxy worker` starts more anywhere.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from typing import Any

from core.migrate import upgrade
from core.modelload import set_torch_threads, share_threads
from core.settings import Settings

log = logging.getLogger(__name__)


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve /v1/chat/completions and /review")
    p.add_argument("--host", help="override LEARNPROXY_HOST")
    p.add_argument("--port", type=int, help="override LEARNPROXY_PORT")
    p.add_argument("--model", help="override LEARNPROXY_MODEL: the bundled default, an HF id or a path")
    p.add_argument("--with-worker", action="store_true", help="also start a judge worker and a train worker")
    p.set_defaults(func=run)


def overridden(settings: Settings, args: argparse.Namespace) -> Settings:
    update = {k: getattr(args, k) for k in ("host", "port", "model") if getattr(args, k, None) is not None}
    return settings.model_copy(update=update)


def threads_for(settings: Settings, *, with_worker: bool) -> Settings:
    """Share the cores between the engine, the trainer and the judge tasks this command starts.

    Alone, the engine keeps torch's default. With workers, every process gets an equal share,
    passed on through the settings, so that they do not oversubscribe the cores together.
    """
    if settings.torch_threads or not with_worker:
        return settings
    return settings.model_copy(update={"torch_threads": share_threads(2 + settings.judge_concurrency)})


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that gives a child process these exact settings."""
    env = dict(os.environ)
    for name, value in settings.model_dump(mode="json").items():
        if value is None:
            env.pop(f"LEARNPROXY_{name.upper()}", None)
            continue
        if isinstance(value, list):
            env[f"LEARNPROXY_{name.upper()}"] = ",".join(value)
        elif isinstance(value, bool):
            env[f"LEARNPROXY_{name.upper()}"] = str(value).lower()
        else:
            env[f"LEARNPROXY_{name.upper()}"] = str(value)
    return env


def start_workers(settings: Settings) -> list[subprocess.Popen[bytes]]:
    workers = []
    for queue in ("judge", "train"):
        cmd = [sys.executable, "-m", "cli.main", "worker", "--queues", queue, "--hostname", f"{queue}-%h"]
        if queue == "judge":
            cmd += ["--concurrency", str(settings.judge_concurrency)]
        log.info("starting a worker: %s", " ".join(cmd))
        workers.append(subprocess.Popen(cmd, env=settings_env(settings)))
    return workers


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        worker.terminate()  # Celery's warm shutdown: running tasks finish, unacked ones come back
    for worker in workers:
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()


def run(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from cli.app import build_app

    settings = threads_for(overridden(settings, args), with_worker=args.with_worker)
    set_torch_threads(settings.torch_threads)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.db_url)
    workers = start_workers(settings) if args.with_worker else []
    try:
        config = uvicorn.Config(
            build_app(settings), host=settings.host, port=settings.port,
            timeout_graceful_shutdown=30, log_level="info",
        )
        uvicorn.Server(config).run()
    finally:
        stop_workers(workers)
    return 0
