"""Review fixtures: settings with an admin token and a client key, and an app mounting /review."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

import review
from core.settings import Settings

ADMIN = "admin-secret-token"
CLIENT_KEY = "sk-client-key"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Overrides the shared fixture: review needs an admin token and a client key to tell apart."""
    return Settings(
        data_dir=tmp_path / "data", enqueue=False, auto_train=False, admin_token=ADMIN, api_keys=[CLIENT_KEY]
    )


def build_app(settings: Settings, session_factory: sessionmaker[Session]) -> FastAPI:
    app = FastAPI(title="review test app")
    review.mount(app, settings, session_factory)
    return app


@pytest.fixture
def app(settings: Settings, session_factory: sessionmaker[Session]) -> FastAPI:
    return build_app(settings, session_factory)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


@pytest.fixture
def admin(client: TestClient) -> TestClient:
    """The same client, sending the admin token as a bearer header."""
    client.headers["Authorization"] = f"Bearer {ADMIN}"
    return client
