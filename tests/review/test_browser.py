"""A real browser (Debian's Chromium via Playwright) against a real uvicorn server in a thread.

It logs in, opens a session, labels a turn, reloads and sees the label; it saves screenshots of
the overview and the session page under `.artifacts/` for a person to look at.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from core.settings import Settings
from tests.review.conftest import ADMIN, build_app
from tests.utils.factories import judged_session, make_adapter_version, make_label, make_session, make_turn
from tests.utils.server import run_server

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def require_chromium() -> None:
    if CHROMIUM.exists():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{CHROMIUM} is missing and CI=true requires the browser test (apt-get install chromium)")
    pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium package to run the browser test")


@pytest.fixture
def server(settings: Settings, session_factory: sessionmaker[Session]) -> Iterator[str]:
    with run_server(build_app(settings, session_factory)) as url:  # binds port 0
        yield url


@pytest.fixture
def seeded(db: Session) -> dict[str, str | int]:
    """A few sessions over two adapter versions, so the overview charts have something to draw."""
    from core.pointer import publish

    v1, v2 = (
        make_adapter_version(db, metrics={"loss": 0.61}),
        make_adapter_version(db, metrics={"loss": 0.47}),
    )
    publish(db, v1.id)
    for _ in range(3):
        judged_session(db, n_turns=4, adapter=v1)
    publish(db, v2.id)
    older = judged_session(db, n_turns=3, adapter=v2)
    make_label(db, older.turns[0], value=1)
    make_label(db, older.turns[1], value=1)
    side = make_session(db)
    make_turn(db, side, turn_type="side", response_text="A title for this chat: notes")
    chat = judged_session(db, n_turns=2, adapter=v2)
    db.commit()
    return {"session": chat.id, "turn": chat.turns[1].id}


def test_login_label_and_reload_in_a_real_browser(server: str, seeded: dict) -> None:
    require_chromium()
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(15_000)
            page.goto(f"{server}/review")
            page.fill("input[name=token]", ADMIN)
            page.fill("input[name=name]", "browser-tester")
            page.click("button[type=submit]")
            expect(page.locator("h1")).to_have_text("Overview")
            expect(page.locator("svg.chart").first).to_be_visible()
            page.screenshot(path=str(ARTIFACTS / "review-overview.png"), full_page=True)

            page.click("nav >> text=Sessions")
            expect(page.locator("table.list tbody tr")).to_have_count(6)
            page.screenshot(path=str(ARTIFACTS / "review-sessions.png"), full_page=True)
            page.click(f"text={seeded['session']}")
            turn = page.locator(f"#turn-{seeded['turn']}")
            expect(turn.locator(".label-in-force")).to_have_count(0)
            turn.locator("input[name=value][value='-1']").check()
            turn.locator("input[name=hint]").fill("Quote the line instead of reading again.")
            turn.locator("button:has-text('Save label')").click()
            expect(page.locator(f"#turn-{seeded['turn']} .notice")).to_have_text("Label saved.")

            page.reload()
            expect(page.locator(".notice")).to_have_count(0)  # the saved notice shows once only
            label = page.locator(f"#turn-{seeded['turn']} .label-in-force")
            expect(label).to_have_attribute("data-label", "-1")
            expect(page.locator(f"#turn-{seeded['turn']} .history")).to_contain_text("by browser-tester")
            page.screenshot(path=str(ARTIFACTS / "review-session.png"), full_page=True)

            page.click("nav >> text=Adapters")
            expect(page.locator(".serving-chip")).to_have_count(1)
            page.screenshot(path=str(ARTIFACTS / "review-adapters.png"), full_page=True)
        finally:
            browser.close()
    assert (ARTIFACTS / "review-overview.png").stat().st_size > 10_000
    assert (ARTIFACTS / "review-session.png").stat().st_size > 10_000
