"""The review JSON API and its auth: who gets in, labels, filters, 404s, stats, adapter actions."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session, sessionmaker

from core.models import AdapterState, Label
from core.pointer import current_version_id, publish
from core.settings import Settings
from tests.review.conftest import ADMIN, CLIENT_KEY, build_app
from tests.utils.factories import judged_session, make_adapter_version, make_label, make_session, make_turn

ROUTES = [
    ("GET", "/review/api/sessions", None),
    ("GET", "/review/api/stats", None),
    ("GET", "/review/api/adapters", None),
    ("PUT", "/review/api/turns/1/label", {"value": 1}),
]


@pytest.fixture
def seeded(db: Session) -> dict[str, int | str]:
    v1 = make_adapter_version(db, state=AdapterState.ready)
    publish(db, v1.id)
    chat = judged_session(db, n_turns=3, adapter=v1)
    side = make_session(db)
    make_turn(db, side, turn_type="side", response_text="a side answer about kittens")
    db.commit()
    return {
        "session": chat.id,
        "turn": chat.turns[0].id,
        "second": chat.turns[1].id,
        "side": side.id,
        "version": v1.id,
    }


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
@pytest.mark.parametrize(
    ("auth", "status"),
    [
        (None, 401),
        ("Bearer wrong-token", 401),
        (f"Bearer {CLIENT_KEY}", 403),
        ("Basic abc", 401),
        (f"Bearer {ADMIN}", 200),
    ],
)
def test_api_auth(
    client: TestClient, seeded: dict, method: str, path: str, body: dict | None, auth: str | None, status: int
) -> None:
    headers = {"Authorization": auth} if auth else {}
    response = client.request(method, path, json=body, headers=headers)
    assert response.status_code == status, response.text
    if status != 200:
        error = response.json()["error"]
        assert error["type"] in ("authentication_error", "permission_error")
        if status == 403:  # a client key is recognised, and told what review needs instead
            assert "admin token" in error["message"]


def test_client_key_is_refused_with_a_clear_message(client: TestClient, seeded: dict) -> None:
    response = client.get("/review/api/sessions", headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert response.status_code == 403
    assert response.json()["error"]["message"] == "This is a client API key; review needs the admin token."


def test_review_is_closed_without_an_admin_token(
    tmp_path: Path, session_factory: sessionmaker[Session]
) -> None:
    no_token = Settings(data_dir=tmp_path / "other", api_keys=[CLIENT_KEY])
    with TestClient(build_app(no_token, session_factory)) as c:
        for headers in ({}, {"Authorization": "Bearer anything"}):
            api = c.get("/review/api/stats", headers=headers)
            assert api.status_code == 403
            assert "LEARNPROXY_ADMIN_TOKEN" in api.json()["error"]["message"]
        page = c.get("/review")
        assert page.status_code == 403 and "LEARNPROXY_ADMIN_TOKEN" in page.text
        login = c.post("/review/login", data={"token": ""})
        assert login.status_code == 403 and "LEARNPROXY_ADMIN_TOKEN" in login.text


def test_label_put_keeps_history_and_newest_wins(admin: TestClient, seeded: dict, db: Session) -> None:
    turn = seeded["turn"]
    first = admin.put(f"/review/api/turns/{turn}/label", json={"value": -1, "hint": "Check the file first."})
    assert first.status_code == 200, first.text
    assert first.json()["value"] == -1 and first.json()["author"] == "admin"
    second = admin.put(
        f"/review/api/turns/{turn}/label",
        json={"value": 1, "author": "ana"},
        headers={"X-Review-Author": "ignored"},
    )
    assert second.status_code == 200 and second.json()["author"] == "ana"

    detail = admin.get(f"/review/api/turns/{turn}").json()
    assert detail["label"]["value"] == 1 and detail["label"]["author"] == "ana"
    assert [lab["value"] for lab in detail["label_history"]] == [1, -1]
    history = admin.get(f"/review/api/turns/{turn}/labels").json()
    assert [(h["value"], h["hint"]) for h in history] == [(1, None), (-1, "Check the file first.")]
    rows = db.scalars(select(Label).where(Label.turn_id == turn).order_by(Label.id)).all()
    assert [r.value for r in rows] == [-1, 1]  # append-only: the first label is still there


@pytest.mark.parametrize(
    ("body", "param", "needle"),
    [
        ({"value": 2}, "value", "Input should be -1, 0 or 1"),
        ({"value": "good"}, "value", "Input should be -1, 0 or 1"),
        ({}, "value", "Field required"),
        ({"value": 1, "extra": True}, "extra", "Extra inputs are not permitted"),
        ({"value": 1, "hint": "x" * 9000}, "hint", "at most 8000 characters"),
    ],
)
def test_bad_label_is_422_with_a_clear_message(
    admin: TestClient, seeded: dict, body: dict, param: str, needle: str
) -> None:
    response = admin.put(f"/review/api/turns/{seeded['turn']}/label", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert needle in error["message"]


def test_unknown_ids_are_404(admin: TestClient, seeded: dict) -> None:
    for method, path, body in [
        ("GET", "/review/api/turns/99999", None),
        ("PUT", "/review/api/turns/99999/label", {"value": 1}),
        ("GET", "/review/api/turns/99999/labels", None),
        ("GET", "/review/api/sessions/no-such-session", None),
        ("POST", "/review/api/adapters/404/promote", None),
    ]:
        response = admin.request(method, path, json=body)
        assert response.status_code == 404, (path, response.text)
        assert response.json()["error"]["code"] == "not_found"


def test_session_detail_has_votes_hints_advantage_and_version(admin: TestClient, seeded: dict) -> None:
    detail = admin.get(f"/review/api/sessions/{seeded['session']}").json()
    first = detail["turns"][0]
    assert [t["turn_index"] for t in detail["turns"]] == [0, 1, 2]
    assert [t["context_shared"] for t in detail["turns"]] == [0, 2, 4]  # history resent each turn
    assert first["messages"][0]["role"] == "system" and first["tools"][0]["function"]["name"] == "read_file"
    assert first["tool_calls"][0]["function"]["name"] == "read_file"
    assert first["next_state"] == [{"role": "tool", "tool_call_id": "call_0", "content": "line 0: buy milk"}]
    assert [v["score"] for v in first["votes"]] == [1, 1, -1]
    assert all("\\boxed" in v["raw_text"] for v in first["votes"])
    assert first["hint"] == "Read the file before answering."
    assert first["hint_candidates"][0]["hint"] == "Read the file before answering."
    assert first["advantage"]["opd"] == 0.12 and first["adapter_version"] == seeded["version"]
    tokens = admin.get(f"/review/api/turns/{first['id']}", params={"tokens": "true"}).json()
    assert tokens["prompt_token_ids"] == list(range(1, 41))
    assert len(tokens["response_logprobs"]) == len(tokens["response_token_ids"]) == 4


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, {"main", "side"}),
        ({"turn_type": "side"}, {"side"}),
        ({"score": "-1"}, {"main"}),
        ({"score": "none"}, {"side"}),
        ({"has_hint": "true"}, {"main"}),
        ({"adapter_version": "base"}, {"side"}),
        ({"q": "kittens"}, {"side"}),
        ({"labeled": "true"}, set()),
        ({"since": "2000-01-01", "until": "2999-12-31"}, {"main", "side"}),
        ({"until": "2000-01-01"}, set()),
    ],
)
def test_session_filters(admin: TestClient, seeded: dict, params: dict, expected: set[str]) -> None:
    names = {seeded["session"]: "main", seeded["side"]: "side"}
    data = admin.get("/review/api/sessions", params=params).json()
    assert {names[s["id"]] for s in data["data"]} == expected
    assert data["total"] == len(expected)


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"score": "2"}, "score"),
        ({"since": "yesterday"}, "since"),
        ({"has_hint": "maybe"}, "has_hint"),
        ({"adapter_version": "v1"}, "adapter_version"),
        ({"limit": "0"}, "limit"),
    ],
)
def test_bad_filters_are_422(admin: TestClient, seeded: dict, params: dict, param: str) -> None:
    response = admin.get("/review/api/turns", params=params)
    assert response.status_code == 422
    assert response.json()["error"]["param"] == param


def test_stats_count_and_agreement(admin: TestClient, seeded: dict, db: Session) -> None:
    from core.models import Turn

    first, second = db.get(Turn, seeded["turn"]), db.get(Turn, seeded["second"])
    assert first is not None and second is not None
    make_label(db, first, value=-1)
    make_label(db, first, value=1)  # newest label agrees with the judge's +1
    make_label(db, second, value=1)  # the judge said -1
    db.commit()
    stats = admin.get("/review/api/stats").json()
    assert stats["turns"] == 4 and stats["main_turns"] == 3 and stats["judged"] == 3
    assert stats["judged_share"] == 1.0
    assert stats["score_distribution"] == {"-1": 1, "0": 0, "1": 2, "none": 1}
    assert stats["agreement"]["compared"] == 2 and stats["agreement"]["rate"] == 0.5
    cell = {(c["judge"], c["label"]): c["n"] for c in stats["agreement"]["confusion"]}
    assert cell[(1, 1)] == 1 and cell[(-1, 1)] == 1
    (series,) = stats["reward_by_version"]
    assert series["version"] == seeded["version"] and [p[1] for p in series["points"]] == [1.0, 0.0, 0.3333]


def test_promote_and_rollback_move_the_pointer(admin: TestClient, seeded: dict, db: Session) -> None:
    v2 = make_adapter_version(db, state=AdapterState.ready)
    failed = make_adapter_version(db, state=AdapterState.failed)
    db.commit()
    assert admin.post(f"/review/api/adapters/{v2.id}/promote").json() == {"current": v2.id}
    assert admin.post(f"/review/api/adapters/{failed.id}/promote").status_code == 409
    listing = admin.get("/review/api/adapters").json()
    assert listing["current"] == v2.id
    assert {v["id"]: v["state"] for v in listing["versions"]}[seeded["version"]] == "retired"
    assert admin.post("/review/api/adapters/rollback").json() == {"current": seeded["version"]}
    assert admin.post("/review/api/adapters/rollback").json() == {"current": None}
    assert admin.post("/review/api/adapters/rollback").status_code == 409  # the base model is served
    db.expire_all()
    assert current_version_id(db) is None


def test_openapi_schema_lists_the_api_not_the_pages(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "put" in paths["/review/api/turns/{turn_id}/label"]
    assert "/review/api/stats" in paths and "/review/api/sessions" in paths
    assert not any(p.startswith("/review/sessions") or p == "/review/login" for p in paths)


def test_unreachable_db_gives_an_error_page_not_a_trace(tmp_path: Path, settings: Settings) -> None:
    # A directory cannot be opened as a SQLite file: every query fails with OperationalError.
    broken = sessionmaker(create_engine(f"sqlite:///{tmp_path}"))
    with TestClient(build_app(settings, broken), raise_server_exceptions=False) as c:
        page = c.get("/review", headers={"Authorization": f"Bearer {ADMIN}"})
        assert page.status_code == 503 and "text/html" in page.headers["content-type"]
        assert "feedback database is unreachable" in page.text and "Traceback" not in page.text
        assert "sqlite" not in page.text.lower()
        api = c.get("/review/api/sessions", headers={"Authorization": f"Bearer {ADMIN}"})
        assert api.status_code == 503 and api.json()["error"]["code"] == "database_unavailable"
        assert api.headers["Retry-After"] == "5"
