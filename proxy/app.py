"""The proxy's FastAPI application: `create_app(settings)` wires the engine, adapters and logging.

Everything shared lives on `app.state`, built in the lifespan and torn down in reverse: on shutdown
the turn logger is flushed last among the request-path parts, so every delivered response is in
the DB. The lead mounts further routers (review) on the returned app.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.db import make_engine, make_session_factory
from core.modelload import load_tokenizer, resolve_model_path
from core.settings import Settings
from proxy.engines.base import Engine
from proxy.errors import BodyTooLarge, error_response, install_error_handlers
from proxy.routes import chat, health, models
from proxy.serving_chat import ChatService

log = logging.getLogger(__name__)


class BodyLimit:
    """413 for a body over the limit: by Content-Length up front, and by counting what streams in."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                await error_response(BodyTooLarge(self.limit))(scope, receive, send)
                return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise BodyTooLarge(self.limit)  # raised inside the route's body read: a 413
            return message

        await self.app(scope, counted, send)


def on_ready_hook(settings: Settings) -> Callable[[list[int]], None]:
    """What the turn logger calls with turns that became ready: queue them for the judge."""
    if not settings.enqueue:
        return lambda ids: None
    from core.celery_app import JUDGE_TASK, create_celery

    celery = create_celery(settings)

    def send(ids: list[int]) -> None:
        for turn_id in ids:
            celery.send_task(JUDGE_TASK, args=[turn_id])

    return send


async def _sweep_idle(tracker: Any, every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        try:
            await asyncio.to_thread(tracker.sweep_idle, datetime.now(UTC))
        except Exception:
            log.exception("idle-session sweep failed")


def _build_engine(settings: Settings, engine: Engine | None) -> Engine:
    if engine is not None:
        return engine
    from proxy.engines.factory import build_engine

    return build_engine(settings)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    from proxy.adapters import AdapterManager
    from proxy.sessions import SessionTracker
    from proxy.turnlog import TurnLogger

    settings: Settings = app.state.settings
    state = app.state
    state.started_at = int(time.time())
    state.db_engine = make_engine(settings.db_url)
    state.session_factory = make_session_factory(state.db_engine)
    path = await asyncio.to_thread(resolve_model_path, settings.model, settings.models_dir)
    state.tokenizer = await asyncio.to_thread(load_tokenizer, path)
    state.engine = _build_engine(settings, state.given_engine)
    await state.engine.start()
    state.adapters = AdapterManager(state.engine, state.session_factory, settings)
    await state.adapters.start()
    state.turn_logger = TurnLogger(
        state.session_factory,
        flush_interval_s=settings.log_flush_interval_s,
        batch_size=settings.log_batch_size,
        on_ready=on_ready_hook(settings),
    )
    state.turn_logger.start()
    state.tracker = SessionTracker(
        state.session_factory, state.turn_logger, idle_timeout_s=settings.session_idle_timeout_s
    )
    await asyncio.to_thread(state.tracker.load_open_sessions)
    state.chat = ChatService(settings, state.tokenizer, state.engine, state.adapters, state.tracker)
    sweeper = asyncio.create_task(_sweep_idle(state.tracker, min(60.0, settings.session_idle_timeout_s / 4)))
    try:
        yield
    finally:
        sweeper.cancel()
        await _quietly("adapters.stop", state.adapters.stop())
        await asyncio.to_thread(state.turn_logger.stop)
        await _quietly("engine.stop", state.engine.stop())
        state.db_engine.dispose()


async def _quietly(what: str, aw: Awaitable[Any]) -> None:
    """Shutdown keeps going past one failing part, so the others still close."""
    try:
        await aw
    except Exception:
        log.exception("%s failed during shutdown", what)


def create_app(settings: Settings, *, engine: Engine | None = None) -> FastAPI:
    """The proxy app for `settings`; pass `engine` to serve with a ready-made one (tests, benches)."""
    app = FastAPI(title="learnproxy", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.state.given_engine = engine
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(models.router)
    app.include_router(chat.router)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    return app
