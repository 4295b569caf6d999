"""The review queries, the API and the export on PostgreSQL (dates, ILIKE, aggregates differ)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from core.db import make_engine, make_session_factory
from core.models import Base
from core.settings import Settings
from review.export import export_rows
from review.filters import TurnFilters
from tests.review.conftest import ADMIN, build_app
from tests.utils.factories import judged_session, make_adapter_version, make_label

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_factory(pg_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(pg_url)
    Base.metadata.create_all(engine)
    yield make_session_factory(engine)
    engine.dispose()


def test_api_and_export_on_postgres(settings: Settings, pg_factory: sessionmaker[Session]) -> None:
    with pg_factory() as db:
        v1 = make_adapter_version(db)
        chat = judged_session(db, n_turns=3, adapter=v1)
        make_label(db, chat.turns[0], value=1)
        db.commit()
        session_id, first = chat.id, chat.turns[0].id
    with TestClient(build_app(settings, pg_factory)) as c:
        c.headers["Authorization"] = f"Bearer {ADMIN}"
        listing = c.get(
            "/review/api/sessions", params={"since": "2000-01-01", "q": "READ IT", "labeled": "true"}
        )
        assert [s["id"] for s in listing.json()["data"]] == [session_id]
        stats = c.get("/review/api/stats").json()
        assert stats["turns_per_day"][0]["turns"] == 3 and stats["agreement"]["rate"] == 1.0
        assert c.put(f"/review/api/turns/{first}/label", json={"value": 0}).status_code == 200
        assert c.get(f"/review/api/turns/{first}").json()["label"]["value"] == 0
        assert "Turn 2" in c.get(f"/review/sessions/{session_id}").text
    rows = list(export_rows(pg_factory, TurnFilters(adapter_version=str(v1.id)), batch_size=2))
    assert [r["turn_index"] for r in rows] == [0, 1, 2] and rows[0]["label"]["value"] == 0
    assert rows[0]["prompt_token_ids"] == list(range(1, 41))
