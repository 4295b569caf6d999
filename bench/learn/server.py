"""A real `learnproxy serve --with-worker` subprocess on a fresh data dir and a free port.

The benchmark talks to it only over HTTP; nothing runs in-process behind the proxy's back.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

from core.modelload import DEFAULT_ALIASES, resolve_model_path
from core.settings import DEFAULT_MODEL, Settings

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 600.0  # first start converts nothing (the model is linked) but loads it on 2 cores
STOP_TIMEOUT_S = 60.0


class ServerFailed(RuntimeError):
    """The proxy exited or never became ready; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _link_model(settings: Settings, data_dir: Path) -> None:
    """Reuse the converted default model instead of converting it again in every fresh data dir."""
    if settings.model not in DEFAULT_ALIASES:
        return
    source = Path(resolve_model_path(settings.model, settings.models_dir))
    target = data_dir / "models" / DEFAULT_MODEL
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        target.symlink_to(source.resolve(), target_is_directory=True)


def _command() -> list[str]:
    script = Path(sys.executable).with_name("learnproxy")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "cli.main"]
    return [*head, "serve", "--with-worker"]


@dataclass
class Server:
    """One proxy + worker, started on enter and stopped (process group and all) on exit."""

    settings: Settings  # the child's settings: data dir, port, method, auto_train
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    @property
    def db_path(self) -> Path:
        """The server's SQLite feedback DB, which the benchmark reads read-only."""
        return self.settings.data_dir / "learnproxy.db"

    def __enter__(self) -> Server:
        from cli.serve import settings_env

        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        env = settings_env(self.settings)
        env.setdefault("HF_HUB_OFFLINE", "1")
        with self.log_path.open("ab") as log:
            # A new session makes the server and its worker one process group we can stop together.
            self.proc = subprocess.Popen(_command(), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self._wait_ready()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServerFailed(f"learnproxy serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.base_url}/ready", timeout=5.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.stop()
        raise ServerFailed(f"learnproxy serve was not ready after {READY_TIMEOUT_S:.0f}s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop serve, then whatever is left of its process group (a worker can outlive serve)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self._end_group(proc.pid)

    @staticmethod
    def _end_group(pgid: int) -> None:
        for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 0.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                return  # the group is empty: everything has exited
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.5)

    # --- adapter versions ----------------------------------------------------------------------

    def version_models(self) -> dict[int, str]:
        """Served adapter versions by number, read from `GET /v1/models` (`<served>@vN` names)."""
        pattern = re.compile(rf"^{re.escape(self.settings.served_model_name)}@v(\d+)$")
        try:
            data = httpx.get(f"{self.base_url}/v1/models", timeout=10.0).json().get("data", [])
        except (httpx.HTTPError, ValueError):
            return {}
        found: dict[int, str] = {}
        for item in data:
            match = pattern.match(str(item.get("id", "")))
            if match:
                found[int(match.group(1))] = match.group(0)
        return found

    def wait_for_version(self, newer_than: int, timeout_s: float) -> tuple[int, str] | None:
        """The newest served version above `newer_than`, waiting up to `timeout_s`; None if none came."""
        deadline = time.monotonic() + timeout_s
        while True:
            versions = {n: name for n, name in self.version_models().items() if n > newer_than}
            if versions:
                top = max(versions)
                return top, versions[top]
            if time.monotonic() >= deadline:
                return None
            time.sleep(2.0)


def child_settings(settings: Settings, data_dir: Path, *, method: str, judge_seed: int | None = None,
                   lockstep: bool = False) -> Settings:
    """The server's settings: the caller's, on a fresh data dir and port, with the method set and the judge's
    votes seeded with `judge_seed`. With `lockstep`, nothing trains but what the benchmark asks for, and
    the engine decodes one sequence at a time: a batch's float sums differ from a lone sequence's in the
    last bits, enough to flip a sampled token now and then (bench/learn/lockstep.py)."""
    _link_model(settings, data_dir)
    trains = method != "off"
    return settings.model_copy(update={
        "data_dir": data_dir, "database_url": None, "broker_url": None, "host": "127.0.0.1",
        "port": free_port(), "enqueue": True, "auto_train": trains and not lockstep, "auto_publish": True,
        "method": method if trains else settings.method, "api_keys": [], "judge_seed": judge_seed,
        **({"max_batch_size": 1} if lockstep else {}),
    })
