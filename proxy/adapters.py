"""Live adapter hot-swap: follow the DB's serving pointer without pausing or failing any request.

The pointer (`core.pointer`, one `ServingPointer` row) says which `AdapterVersion` every replica
serves. When it moves, the new version is loaded on the engine under its own never-reused name
FIRST; only then do new leases get it. A request holds a `Lease` for its whole life, so it finishes
on the version it started with. Versions no lease holds any more are unloaded, except the newest
`settings.keep_adapters` (kept for rollback) and the live one. A failed load is logged and the old
version keeps serving.

Model names clients may ask for:
    settings.served_model_name          the live adapter (follows the pointer)
    settings.model                      the base model, no adapter
    f"{served_model_name}@v{N}"         a loaded version, pinned
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from core.models import AdapterVersion
from core.pointer import current_version_id
from core.settings import Settings
from proxy.engines.base import Engine, EngineError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lease:
    """What one request is served with: the engine adapter name and its version (None: base)."""

    adapter: str | None
    version_id: int | None


@dataclass(frozen=True)
class _Target:
    version_id: int | None
    name: str | None
    path: str | None


class AdapterManager:
    """Keeps the engine's adapters in step with the pointer; hands out leases per request."""

    def __init__(self, engine: Engine, session_factory: sessionmaker[Session], settings: Settings) -> None:
        self.engine = engine
        self.session_factory = session_factory
        self.settings = settings
        self._live = Lease(adapter=None, version_id=None)
        self._loaded: dict[int, str] = {}  # version id -> engine name
        self._loads: Counter[int] = Counter()  # engine loads per version, for fresh names on reload
        self._refs: Counter[int | None] = Counter()
        self._lock = threading.Lock()  # leases are cheap and may be taken from any thread
        self._sync_lock = asyncio.Lock()
        self._failed_at: int | None = None  # the pointer's version whose load failed; not retried
        self._task: asyncio.Task[None] | None = None
        self.swaps = 0

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the pointer's version, then follow the pointer every `adapter_poll_interval_s`."""
        await self.sync_now()
        self._task = asyncio.create_task(self._poll(), name="adapter-manager")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.settings.adapter_poll_interval_s)
            try:
                await self.sync_now()
            except Exception:  # a DB hiccup must not stop the follower; the next poll retries
                log.exception("adapter pointer poll failed")

    # --- leases --------------------------------------------------------------------------------
    @property
    def live(self) -> Lease:
        return self._live

    def model_names(self) -> list[str]:
        served = self.settings.served_model_name
        with self._lock:
            pinned = [f"{served}@v{vid}" for vid in sorted(self._loaded)]
        return [served, self.settings.model, *pinned]

    def _resolve(self, model: str) -> Lease:
        served = self.settings.served_model_name
        if model == served:
            return self._live
        if model == self.settings.model:
            return Lease(adapter=None, version_id=None)
        prefix = f"{served}@v"
        if model.startswith(prefix) and model[len(prefix):].isdigit():
            vid = int(model[len(prefix):])
            if vid in self._loaded:
                return Lease(adapter=self._loaded[vid], version_id=vid)
        raise KeyError(model)

    @contextlib.contextmanager
    def lease(self, model: str) -> Iterator[Lease]:
        """Hold a version for one request; it is not unloaded while held. KeyError: unknown model."""
        with self._lock:
            held = self._resolve(model)
            self._refs[held.version_id] += 1
        try:
            yield held
        finally:
            with self._lock:
                self._refs[held.version_id] -= 1

    def in_flight(self) -> dict[int | None, int]:
        with self._lock:
            return {k: v for k, v in self._refs.items() if v}

    # --- following the pointer -----------------------------------------------------------------
    async def sync_now(self) -> None:
        """One poll: load and switch to the pointer's version if it moved, then unload drained ones."""
        async with self._sync_lock:
            target = await asyncio.to_thread(self._read_target)
            if target.version_id != self._live.version_id:
                await self._switch(target)
            await self._unload_drained()

    def _read_target(self) -> _Target:
        with self.session_factory() as session:
            vid = current_version_id(session)
            if vid is None:
                return _Target(None, None, None)
            version = session.get(AdapterVersion, vid)
            if version is None:
                return _Target(None, None, None)
            return _Target(vid, version.name, version.path)

    async def _switch(self, target: _Target) -> None:
        if target.version_id is None:
            self._set_live(Lease(adapter=None, version_id=None))
            return
        vid, name = target.version_id, target.name
        assert name is not None
        if vid not in self._loaded:
            if vid == self._failed_at:
                return
            if not await self._load(vid, name, target.path):
                return
        self._set_live(Lease(adapter=self._loaded[vid], version_id=vid))

    async def _load(self, vid: int, name: str, path: str | None) -> bool:
        if self._loads[vid]:
            # Reloading an unloaded version (a rollback to it): engines must never see a name twice,
            # since reusing one hits stale-cache and deadlock bugs in SGLang and vLLM.
            name = f"{name}~r{self._loads[vid]}"
        if name not in self.engine.loaded_adapters():  # else loaded before this manager (re)started
            if not path:
                log.error("adapter version %s has no path; still serving %s", vid, self._live)
                self._failed_at = vid
                return False
            try:
                await self.engine.load_adapter(name, path)
            except EngineError as exc:
                log.error("loading adapter version %s (%s) failed, still serving %s: %s", vid, name,
                          self._live, exc)
                self._failed_at = vid
                return False
        with self._lock:
            self._loaded[vid] = name
            self._loads[vid] += 1
        return True

    def _set_live(self, lease: Lease) -> None:
        with self._lock:
            if lease != self._live:
                log.info("serving adapter version %s (%s), was %s", lease.version_id, lease.adapter,
                         self._live.version_id)
                self._live = lease
                self.swaps += 1
                self._failed_at = None  # a later re-publish of a failed version tries again

    async def _unload_drained(self) -> None:
        keep = set(sorted(self._loaded)[-self.settings.keep_adapters:])
        with self._lock:
            drained = [vid for vid in self._loaded
                       if vid not in keep and vid != self._live.version_id and not self._refs[vid]]
            # a version that is drained is also unleasable from here on: resolve no longer finds it
            names = {vid: self._loaded.pop(vid) for vid in drained}
        for vid, name in names.items():
            try:
                await self.engine.unload_adapter(name)
            except EngineError as exc:
                log.warning("unloading adapter version %s (%s) failed: %s", vid, name, exc)
