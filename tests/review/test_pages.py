"""The server-rendered pages through the ASGI app: login, every page, label and adapter forms."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.models import AdapterState
from core.pointer import publish
from review.auth import COOKIE_NAME
from tests.review.conftest import ADMIN, CLIENT_KEY
from tests.utils.factories import judged_session, make_adapter_version


@pytest.fixture
def seeded(db: Session) -> dict[str, str | int]:
    v1 = make_adapter_version(db, metrics={"loss": 0.5})
    v2 = make_adapter_version(db, metrics={"loss": 0.4})
    publish(db, v1.id)
    publish(db, v2.id)
    chat = judged_session(db, n_turns=2, adapter=v2)
    db.commit()
    return {"session": chat.id, "turn": chat.turns[0].id, "v1": v1.id, "v2": v2.id}


def login(client: TestClient, token: str = ADMIN, name: str = "ana") -> None:
    response = client.post(
        "/review/login",
        data={"token": token, "name": name, "next": "/review/adapters"},
        follow_redirects=False,
    )
    assert response.status_code == 303 and response.headers["location"] == "/review/adapters"


def test_pages_need_login_and_refuse_client_keys(client: TestClient, seeded: dict) -> None:
    page = client.get("/review/sessions")
    assert page.status_code == 401 and 'name="token"' in page.text  # the login form, coming back here
    assert 'value="/review/sessions"' in page.text
    wrong = client.post("/review/login", data={"token": "nope"})
    assert wrong.status_code == 401 and "Invalid admin token" in wrong.text
    key = client.post("/review/login", data={"token": CLIENT_KEY})
    assert key.status_code == 403 and "client API key" in key.text
    client.cookies.set(COOKIE_NAME, "forged", path="/review")
    assert client.get("/review").status_code == 401


def test_login_cookie_opens_every_page(client: TestClient, seeded: dict) -> None:
    login(client)
    overview = client.get("/review")
    assert overview.status_code == 200 and "<svg" in overview.text and "Judge agreement" in overview.text
    assert "Moving average of reward per adapter version" in overview.text
    sessions = client.get(
        "/review/sessions", params={"has_hint": "true", "adapter_version": str(seeded["v2"])}
    )
    assert sessions.status_code == 200 and seeded["session"] in sessions.text
    detail = client.get(f"/review/sessions/{seeded['session']}")
    assert detail.status_code == 200
    for needle in (
        "Request context",
        "read_file",
        "line 0: buy milk",
        "\\boxed{1}",
        "Read the file before",
        "&#34;opd&#34;: 0.12",
        f"v{seeded['v2']}",
    ):
        assert needle in detail.text, needle
    # The second turn resends the first turn's two messages: the page shows only the new ones.
    assert "The first 2 messages are the same as in" in detail.text
    assert detail.text.count("You are a helpful assistant.") == 1
    adapters = client.get("/review/adapters")
    assert adapters.status_code == 200 and "Roll back" in adapters.text and "Promote" in adapters.text
    assert client.get("/review/static/review.css").headers["content-type"].startswith("text/css")
    assert client.get("/review/static/../auth.py").status_code == 404


def test_label_form_appends_and_shows_the_newest(client: TestClient, seeded: dict) -> None:
    login(client, name="ana")
    turn = seeded["turn"]
    saved = client.post(
        f"/review/turns/{turn}/label", data={"value": "-1", "hint": "Quote it."}, follow_redirects=False
    )
    assert saved.status_code == 303 and saved.headers["location"].endswith(f"#turn-{turn}")
    client.post(f"/review/turns/{turn}/label", data={"value": "+1"})
    page = client.get(f"/review/sessions/{seeded['session']}")
    assert 'data-label="1"' in page.text and "2 labels" in page.text and "by ana" in page.text
    bad = client.post(f"/review/turns/{turn}/label", data={"value": "5"})
    assert bad.status_code == 422 and "A label must be -1, 0 or +1" in bad.text
    missing = client.post("/review/turns/987654/label", data={"value": "1"})
    assert missing.status_code == 404 and "No turn 987654" in missing.text
    assert client.get("/review/sessions/nope").status_code == 404


def test_promote_and_rollback_buttons(client: TestClient, seeded: dict, db: Session) -> None:
    login(client)
    rolled = client.post("/review/adapters/rollback")
    assert rolled.status_code == 200 and f"now serving v{seeded['v1']}" in rolled.text
    promoted = client.post(f"/review/adapters/{seeded['v2']}/promote")
    assert promoted.status_code == 200 and f"promoted v{seeded['v2']}" in promoted.text
    failed = make_adapter_version(db, state=AdapterState.failed)
    db.commit()
    refused = client.post(f"/review/adapters/{failed.id}/promote")
    assert refused.status_code == 409 and "cannot be served" in refused.text


def test_a_rejected_version_shows_its_publish_check_and_can_be_promoted(client: TestClient, seeded: dict,
                                                                     db: Session) -> None:
    rows = [{"reply": "You're a helpful AI, designed to help.", "base_reply": "Boil it for eight minutes.",
             "failed": "off_topic", "base_failed": None, "relevance": 0.11, "base_relevance": 0.71,
             "repeated": 0.0, "request": "How do I boil an egg?", "canary": False},
            {"reply": "Shine a torch at it.", "base_reply": "Oil the hinge.", "failed": None, "base_failed": None,
             "relevance": 0.52, "base_relevance": 0.6, "repeated": 0.0, "request": "How do I stop a squeaky door "
             "hinge?", "canary": True}]
    check = {"passed": False, "failed": 1, "base_failed": 0, "slack": 0, "rows": rows}
    rejected = make_adapter_version(db, state=AdapterState.rejected, metrics={"loss": 0.3, "publish_check": check})
    db.commit()
    login(client)
    page = client.get("/review/adapters")
    assert ("rejected: its replies failed 1 of 2 requests (1 of them canary requests), the base model's 0 "
            "(slack 0)") in page.text
    assert "How do I stop a squeaky door hinge? <span class=\"chip\">canary</span>" in page.text
    assert "You&#39;re a helpful AI, designed to help." in page.text and "0.11 (0.71)" in page.text
    assert "loss = 0.3" in page.text and "publish_check =" not in page.text
    promoted = client.post(f"/review/adapters/{rejected.id}/promote")  # a person overrules the check
    assert promoted.status_code == 200 and f"promoted v{rejected.id}" in promoted.text
