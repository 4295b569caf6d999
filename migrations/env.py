"""Alembic environment: the URL comes from learnproxy's Settings (or a connection passed in)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from core.db import make_engine
from core.models import Base
from core.settings import get_settings

target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    url = context.config.get_main_option("sqlalchemy.url") or get_settings().db_url
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url") or get_settings().db_url
    engine = make_engine(url)
    with engine.connect() as conn:
        _configure(conn)
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
