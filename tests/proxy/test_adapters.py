"""Live adapter hot-swap on the real embedded engine with real (random-weight) LoRA adapters.

A load generator keeps streaming requests running while versions are published through the DB
pointer; the manager must load each one first, switch new leases to it, let old requests finish on
their version, and unload drained versions beyond `keep_adapters`.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from core import pointer
from core.models import AdapterState, AdapterVersion
from core.settings import Settings
from proxy.adapters import AdapterManager
from proxy.engines.base import GenerateRequest, SamplingParams
from proxy.engines.embedded import EmbeddedEngine
from tests.utils.adapters import make_adapters

PROMPT = "Once upon a time, in a land far away, there lived"


def _add_version(factory: sessionmaker[Session], path: str | Path, *,
                 publish: bool = True) -> tuple[int, str]:
    name = f"v-{uuid.uuid4().hex[:8]}"
    with factory() as session:
        version = AdapterVersion(name=name, path=str(path), state=AdapterState.ready,
                                 base_model="SmolLM2-135M-Instruct", method="combined")
        session.add(version)
        session.flush()
        if publish:
            pointer.publish(session, version.id)
        session.commit()
        return version.id, name


async def _serve(manager: AdapterManager, engine: EmbeddedEngine, ids: list[int], model: str,
                 n: int) -> dict[str, Any]:
    with manager.lease(model) as lease:
        tokens: list[int] = []
        request = GenerateRequest(uuid.uuid4().hex, ids, SamplingParams(temperature=0.0, max_new_tokens=n),
                                  lease.adapter)
        async for out in engine.generate(request):
            tokens += out.token_ids
        return {"version": lease.version_id, "adapter": lease.adapter, "tokens": tokens}


def _prompt(model_path: str) -> list[int]:
    from core.modelload import load_tokenizer

    return list(load_tokenizer(model_path).encode(PROMPT, add_special_tokens=False))


async def _wait_for(predicate: Any, timeout_s: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_hot_swap_under_load(model_path: str, settings: Settings, session_factory: sessionmaker[Session],
                             tmp_path: Path) -> None:
    settings = settings.model_copy(update={"adapter_poll_interval_s": 0.05, "keep_adapters": 2})
    paths = make_adapters(model_path, tmp_path / "adapters", 5)
    ids = _prompt(model_path)
    results: list[dict[str, Any]] = []
    failures: list[BaseException] = []
    published: dict[int, str] = {}

    async def worker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                results.append(await _serve(manager, engine, ids, settings.served_model_name, 3))
            except BaseException as exc:  # every failure is counted, none may happen
                failures.append(exc)
                return

    async def main() -> dict[str, Any]:
        await engine.start()
        await manager.start()
        stop = asyncio.Event()
        workers = [asyncio.create_task(worker(stop)) for _ in range(2)]
        long_request: asyncio.Task[dict[str, Any]] | None = None
        with contextlib.ExitStack() as pins:
            for i, path in enumerate(paths):
                if i == 2:  # starts on version 2 and must finish on it while version 3 goes live
                    long_request = asyncio.create_task(
                        _serve(manager, engine, ids, settings.served_model_name, 16))
                    await _wait_for(lambda: engine.stats()["active"] >= 1)
                    # A pinned lease keeps version 2 loaded for the replay below, however soon the
                    # long request ends: without it, a drained version 2 is unloaded once two newer
                    # ones are loaded, and when that happens depends on the machine's speed.
                    pinned = f"{settings.served_model_name}@v{manager.live.version_id}"
                    pins.enter_context(manager.lease(pinned))
                vid, name = await asyncio.to_thread(_add_version, session_factory, path)
                published[vid] = name
                await _wait_for(lambda vid=vid: manager.live.version_id == vid)  # type: ignore[misc]
                await _wait_for(lambda vid=vid: any(r["version"] == vid for r in results))  # type: ignore[misc]
            assert long_request is not None
            long = await long_request
            await manager.sync_now()
            held_while_pinned = engine.loaded_adapters()
            # replay the long request on its old version, pinned by name
            old_vid = long["version"]
            replay = await _serve(manager, engine, ids, f"{settings.served_model_name}@v{old_vid}", 16)
        stop.set()
        await asyncio.gather(*workers)
        await manager.sync_now()
        loaded = engine.loaded_adapters()
        await manager.stop()
        await engine.stop()
        return {"long": long, "replay": replay, "loaded": loaded, "pinned": held_while_pinned}

    engine = EmbeddedEngine(model_path, device="cpu", dtype="float32", max_batch_size=8)
    manager = AdapterManager(engine, session_factory, settings)
    out = asyncio.run(main())

    assert failures == []
    vids = sorted(published)
    # every lease names the version that served it, and every version served requests
    assert {r["version"] for r in results} >= set(vids)
    assert all(r["adapter"] == published[r["version"]] for r in results if r["version"] is not None)
    assert all(len(r["tokens"]) == 3 for r in results)
    # the request that started before the swap finished on its old version, token for token
    assert out["long"]["version"] == vids[1]
    assert out["long"]["adapter"] == published[vids[1]]
    assert out["long"]["tokens"] == out["replay"]["tokens"] and len(out["long"]["tokens"]) == 16
    # a held lease keeps its version loaded beyond keep_adapters; once released it is unloaded
    assert published[vids[1]] in out["pinned"]
    # drained versions beyond keep_adapters were unloaded
    assert out["loaded"] == {published[vids[-1]], published[vids[-2]]}
    assert manager.swaps == 5


def test_failed_load_keeps_serving_and_rollback_and_names(model_path: str, settings: Settings,
                                                          session_factory: sessionmaker[Session],
                                                          tmp_path: Path) -> None:
    paths = make_adapters(model_path, tmp_path / "adapters", 1)
    served = settings.served_model_name

    async def main() -> None:
        await engine.start()
        await manager.start()
        assert manager.live.version_id is None
        assert manager.model_names() == [served, settings.model]
        v1, name1 = await asyncio.to_thread(_add_version, session_factory, paths[0])
        await manager.sync_now()
        assert manager.live.version_id == v1 and manager.live.adapter == name1
        assert manager.model_names() == [served, settings.model, f"{served}@v{v1}"]
        v2, _ = await asyncio.to_thread(_add_version, session_factory, tmp_path / "missing")
        await manager.sync_now()  # the load fails: the old version keeps serving
        assert manager.live.version_id == v1
        with manager.lease(served) as lease:
            assert lease.version_id == v1
            assert manager.in_flight() == {v1: 1}
        with manager.lease(settings.model) as lease:
            assert lease.adapter is None and lease.version_id is None
        with pytest.raises(KeyError), manager.lease("no-such-model"):
            pass
        with pytest.raises(KeyError), manager.lease(f"{served}@v{v2}"):
            pass
        with session_factory() as session:  # roll back from the failed v2 to v1
            pointer.rollback(session)
            session.commit()
        await manager.sync_now()
        assert manager.live.version_id == v1
        with session_factory() as session:  # and to the base model
            pointer.point_to(session, None)
            session.commit()
        await manager.sync_now()
        assert manager.live == type(manager.live)(adapter=None, version_id=None)
        await manager.stop()
        await engine.stop()

    engine = EmbeddedEngine(model_path, device="cpu", dtype="bfloat16", max_batch_size=2)
    manager = AdapterManager(engine, session_factory, settings)
    asyncio.run(main())


def test_rollback_to_an_unloaded_version_loads_it_under_a_fresh_name(
    model_path: str, settings: Settings, session_factory: sessionmaker[Session], tmp_path: Path
) -> None:
    paths = make_adapters(model_path, tmp_path / "adapters", 2)
    settings = settings.model_copy(update={"keep_adapters": 1})

    async def main() -> None:
        await engine.start()
        await manager.start()
        v1, name1 = await asyncio.to_thread(_add_version, session_factory, paths[0])
        await manager.sync_now()
        v2, name2 = await asyncio.to_thread(_add_version, session_factory, paths[1])
        await manager.sync_now()
        assert engine.loaded_adapters() == {name2}  # v1 drained and unloaded (keep 1)
        with session_factory() as session:
            assert pointer.rollback(session) == v1
            session.commit()
        await manager.sync_now()
        assert manager.live.version_id == v1
        assert manager.live.adapter == f"{name1}~r1"  # never the name the engine saw before
        assert f"{name1}~r1" in engine.loaded_adapters() and name1 not in engine.loaded_adapters()
        await manager.stop()
        await engine.stop()

    engine = EmbeddedEngine(model_path, device="cpu", dtype="bfloat16", max_batch_size=2)
    manager = AdapterManager(engine, session_factory, settings)
    asyncio.run(main())
