"""learnproxy's own proxy on the embedded engine, in a thread: the default judge, as deployed.

The judge's default endpoint is learnproxy itself serving the base model with no adapter, so the
judge benchmark and the real-model judge test run exactly that: `proxy.app.create_app` with the
embedded engine, its continuous batching serving the m concurrent votes together. It logs into a
throwaway data dir (judge calls are internal turns, which are never logged anyway).
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

import uvicorn

from core.db import make_engine
from core.models import Base
from core.settings import Settings
from proxy.app import create_app


class LocalJudgeServer:
    """`with LocalJudgeServer(settings) as server:` serves `settings.model` at `server.url`."""

    def __init__(self, settings: Settings) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="learnproxy-judge-")
        data = Path(self._tmp.name)
        (data / "models").symlink_to(settings.models_dir.resolve(), target_is_directory=True)
        self.settings = settings.model_copy(update={
            "data_dir": data, "database_url": None, "port": 0, "engine": "embedded",
            "enqueue": False, "auto_train": False, "api_keys": [],
        })
        # port 0: the OS picks a free port as the server binds it (a port picked first can be taken between)
        config = uvicorn.Config(create_app(self.settings), host="127.0.0.1", port=0, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True, name="judge-server")

    def __enter__(self) -> LocalJudgeServer:
        db = make_engine(self.settings.db_url)
        Base.metadata.create_all(db)
        db.dispose()
        self._thread.start()
        deadline = time.monotonic() + 300  # the first start may convert the bundled model
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the local judge server did not start")
            time.sleep(0.05)
        return self

    @property
    def url(self) -> str:
        """The server's /v1 base URL, once it has bound its port."""
        if not self._server.started:
            raise RuntimeError("the local judge server has not started: enter it first")
        return f"http://127.0.0.1:{self._server.servers[0].sockets[0].getsockname()[1]}/v1"

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=60)
        self._tmp.cleanup()
