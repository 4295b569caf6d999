"""`GET /health` (the process is up) and `GET /ready` (model loaded and DB reachable)."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

log = logging.getLogger(__name__)
router = APIRouter()

READY_TIMEOUT_S = 5.0


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


def _db_ping(request: Request) -> None:
    with request.app.state.session_factory() as session:
        session.execute(text("SELECT 1"))


async def _check(name: str, coro: object) -> bool:
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            return bool(await coro)  # type: ignore[misc]
    except Exception:
        log.warning("readiness check %s failed", name, exc_info=True)
        return False


@router.get("/ready")
async def ready(request: Request) -> JSONResponse:
    state = request.app.state
    engine_ok = await _check("engine", state.engine.health())
    db_ok = await _check("db", _db_and_true(request))
    body = {"status": "ready" if engine_ok and db_ok else "not_ready", "engine": engine_ok, "db": db_ok}
    return JSONResponse(body, status_code=200 if engine_ok and db_ok else 503)


async def _db_and_true(request: Request) -> bool:
    await asyncio.to_thread(_db_ping, request)
    return True
