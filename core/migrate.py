"""Bring a database to the newest schema with Alembic (every process calls this at start-up)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from core.db import make_engine

ROOT = Path(__file__).resolve().parent.parent


def alembic_config(url: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrade `url` to `revision`, holding one connection so SQLite files and schemas line up."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            cfg = alembic_config(url)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    finally:
        engine.dispose()
