"""The served application: the proxy's OpenAI routes plus the review UI and its JSON API."""

from __future__ import annotations

from fastapi import FastAPI

from core.db import make_engine, make_session_factory
from core.settings import Settings
from proxy.app import create_app
from proxy.engines.base import Engine


def build_app(settings: Settings, *, engine: Engine | None = None) -> FastAPI:
    import review

    app = create_app(settings, engine=engine)
    # The review side reads the same DB through its own pool, so a slow review query never
    # holds a connection the request path needs.
    review.mount(app, settings, make_session_factory(make_engine(settings.db_url, pool_size=2)))
    return app
