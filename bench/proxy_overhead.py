"""The proxy's own overhead: requests/s and p50/p99 latency with the null engine, logging on.

The null engine answers a fixed 16-token reply at once, so what is measured is the proxy itself:
parsing, rendering the template, session assignment, SSE framing and the write-behind logger.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from core.db import make_engine
from core.modelload import load_tokenizer, resolve_model_path
from core.models import Base
from core.settings import Settings
from proxy.app import create_app
from proxy.engines.null import NullEngine

REPLY = "Sure. Here is a short answer to your question, in a few words."


def _serve(app: Any) -> tuple[uvicorn.Server, threading.Thread, str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the proxy did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, f"http://127.0.0.1:{port}"


async def _load(url: str, model: str, clients: int, total: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    counter = iter(range(total))
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

        async def worker() -> None:
            for i in counter:
                body = {
                    "model": model,
                    "messages": [{"role": "user", "content": f"q{i}"}],
                    "stream": i % 2 == 0,
                }
                t0 = time.perf_counter()
                resp = await client.post("/v1/chat/completions", json=body)
                resp.raise_for_status()
                latencies.append((time.perf_counter() - t0) * 1000)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return time.perf_counter() - start, latencies


def run(settings: Settings, *, quick: bool) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        # The model is resolved against the real data dir (a cached conversion), the DB is a temp one.
        path = resolve_model_path(settings.model, settings.models_dir)
        update = {"data_dir": Path(tmp), "database_url": None, "enqueue": False, "model": path}
        cfg = settings.model_copy(update=update)
        db = make_engine(cfg.db_url)
        Base.metadata.create_all(db)  # the models' schema, as the tests build it
        db.dispose()
        tokenizer = load_tokenizer(path)
        reply = tokenizer.encode(REPLY, add_special_tokens=False)
        engine = NullEngine(reply, eos_id=tokenizer.eos_token_id)
        server, thread, url = _serve(create_app(cfg, engine=engine))
        rows = []
        try:
            model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
            for clients in (1, 16, 64):
                total = max(clients * (2 if quick else 8), 20 if quick else 100)
                asyncio.run(_load(url, model, clients, min(clients, 8)))  # warm-up
                secs, lat = asyncio.run(_load(url, model, clients, total))
                lat.sort()
                p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
                rows.append(
                    f"| {clients} | {total} | {total / secs:.1f} | {statistics.median(lat):.1f} | {p99:.1f} |"
                )
        finally:
            server.should_exit = True
            thread.join(60)
    return "\n".join(
        [
            "### Proxy overhead (null engine, logging on)",
            "",
            f"Fixed {len(reply)}-token reply; half the requests streamed; SQLite logging on; "
            "real uvicorn + httpx.",
            "",
            "| clients | requests | req/s | p50 ms | p99 ms |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "Limited by one Python event loop per side, with the load generator and the server "
            "sharing the same CPU cores; the split between them was not profiled.",
        ]
    )
