"""A real uvicorn server in a thread, for end-to-end tests: `with run_server(app) as base_url: ...`.

The server binds port 0 (the OS picks a free port), the lifespan runs for real, and leaving the
block shuts it down gracefully, so the app's shutdown (e.g. the turn logger's flush) has finished
when the block exits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

START_TIMEOUT_S = 120.0  # the lifespan may load a model on a busy 2-core machine
STOP_TIMEOUT_S = 60.0


@contextmanager
def run_server(app: Any, *, host: str = "127.0.0.1", **config: Any) -> Iterator[str]:
    """Serve `app` on a free port in a background thread; yields the base URL (no trailing slash)."""
    cfg = uvicorn.Config(app, host=host, port=0, log_level="warning", lifespan="on", **config)
    server = uvicorn.Server(cfg)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("uvicorn exited during start-up (see the log above)")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise TimeoutError(f"uvicorn did not start in {START_TIMEOUT_S}s")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(STOP_TIMEOUT_S)
        if thread.is_alive():
            raise RuntimeError(f"uvicorn did not stop in {STOP_TIMEOUT_S}s")
