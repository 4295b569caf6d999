"""Shared fixtures: per-test settings and real databases, the real default model, service URLs.

PostgreSQL and Redis tests skip with a reason on a laptop without those servers; under CI=true an
absent server is a failure, never a silent skip.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from core.db import make_engine, make_session_factory
from core.models import Base
from core.settings import Settings

REPO = Path(__file__).resolve().parent.parent
# The converted default model is cached across test runs, outside any per-test data dir.
MODELS_DIR = Path(os.environ.get("LEARNPROXY_TEST_MODELS_DIR", REPO / ".data" / "models"))
PG_ADMIN_URL = os.environ.get("LEARNPROXY_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("LEARNPROXY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip when a server is absent on a laptop; fail under CI=true."""
    if _reachable(host, port):
        return
    message = f"{name} is not reachable at {host}:{port}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}, and CI=true requires it")
    pytest.skip(message)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings on a fresh data dir with a real SQLite file; nothing is queued to a broker."""
    return Settings(data_dir=tmp_path / "data", enqueue=False, auto_train=False)


@pytest.fixture
def db_engine(settings: Settings) -> Iterator[Engine]:
    engine = make_engine(settings.db_url)
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def session_factory(db_engine: Engine) -> sessionmaker[Session]:
    return make_session_factory(db_engine)


@pytest.fixture
def db(session_factory: sessionmaker[Session]) -> Iterator[Session]:
    with session_factory() as session:
        yield session


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL schema for one test, dropped afterwards."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = make_engine(PG_ADMIN_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in PG_ADMIN_URL else "?"
    yield f"{PG_ADMIN_URL}{sep}options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


@pytest.fixture
def redis_url() -> str:
    require_service("Redis", "127.0.0.1", 6379)
    return REDIS_URL


@pytest.fixture(scope="session")
def model_path() -> str:
    """The real SmolLM2-135M-Instruct, converted once into the shared test cache."""
    from core.modelload import resolve_model_path

    return resolve_model_path("SmolLM2-135M-Instruct", MODELS_DIR)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs two workers) the workers split the cores' torch threads
    between them rather than each taking them all (the oversubscription `share_threads` describes)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        from core.modelload import set_torch_threads, share_threads

        set_torch_threads(share_threads(workers))
