"""Migrations from an empty database, on SQLite and on PostgreSQL, match the models exactly."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from core.db import make_engine
from core.migrate import upgrade
from core.models import Base
from core.settings import Settings


def _schema_diff(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_sqlite_from_empty_matches_models(settings: Settings) -> None:
    upgrade(settings.db_url)
    assert set(Base.metadata.tables) <= _tables(settings.db_url)
    assert _schema_diff(settings.db_url) == []
    upgrade(settings.db_url)  # a second upgrade is a no-op


def test_postgres_from_empty_matches_models(pg_url: str) -> None:
    upgrade(pg_url)
    assert set(Base.metadata.tables) <= _tables(pg_url)
    assert _schema_diff(pg_url) == []
