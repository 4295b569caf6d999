"""`learnproxy serve`: the proxy (with the review UI) and, with --with-worker, one Celery worker.

The worker runs as a child process with the same settings, so judging and training happen with no
extra command; `learnproxy worker` starts more anywhere.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from typing import Any

from core.migrate import upgrade
from core.settings import Settings

log = logging.getLogger(__name__)


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve /v1/chat/completions and /review")
    p.add_argument("--host", help="override LEARNPROXY_HOST")
    p.add_argument("--port", type=int, help="override LEARNPROXY_PORT")
    p.add_argument("--model", help="override LEARNPROXY_MODEL: the bundled default, an HF id or a path")
    p.add_argument("--with-worker", action="store_true", help="also start one Celery worker (judge, train)")
    p.set_defaults(func=run)


def overridden(settings: Settings, args: argparse.Namespace) -> Settings:
    update = {k: getattr(args, k) for k in ("host", "port", "model") if getattr(args, k, None) is not None}
    return settings.model_copy(update=update)


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


def start_worker(settings: Settings) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "cli.main", "worker", "--queues", "judge,train"]
    log.info("starting a worker: %s", " ".join(cmd))
    return subprocess.Popen(cmd, env=settings_env(settings))


def run(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from cli.app import build_app

    settings = overridden(settings, args)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.db_url)
    worker = start_worker(settings) if args.with_worker else None
    try:
        config = uvicorn.Config(
            build_app(settings), host=settings.host, port=settings.port,
            timeout_graceful_shutdown=30, log_level="info",
        )
        uvicorn.Server(config).run()
    finally:
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
    return 0
