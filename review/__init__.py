"""Reviewing the feedback DB: the web UI at /review, its JSON API, human labels and export.

The hosting app (the proxy) calls `mount(app, settings, session_factory)`, or includes the router
from `create_router(...)` itself. Pages live under `/review`, JSON under `/review/api`.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from sqlalchemy.orm import Session, sessionmaker

from core.settings import Settings
from review.api import create_api_router
from review.pages import create_pages_router
from review.render import Renderer

BASE_PATH = "/review"


def create_router(settings: Settings, session_factory: sessionmaker[Session]) -> APIRouter:
    """Every review route: the pages (outside the OpenAPI schema) and the JSON API (inside it)."""
    router = APIRouter()
    router.include_router(create_api_router(settings, session_factory, prefix=f"{BASE_PATH}/api"))
    router.include_router(create_pages_router(settings, session_factory, Renderer(BASE_PATH)))
    return router


def mount(app: FastAPI, settings: Settings, session_factory: sessionmaker[Session]) -> None:
    """Add the review UI and API to `app` (static files are served by the router itself)."""
    app.include_router(create_router(settings, session_factory))
