"""`learnproxy review sessions|session|turn|stats`: rich tables and JSON from a real SQLite DB."""

from __future__ import annotations

import argparse
import io
import json

import pytest
from rich.console import Console
from sqlalchemy.orm import Session

from cli import review as review_cli
from core.settings import Settings
from tests.utils.factories import judged_session, make_label


@pytest.fixture
def seeded(db: Session) -> dict[str, str | int]:
    chat = judged_session(db, n_turns=2)
    make_label(db, chat.turns[0], value=-1, hint="Quote the file.", author="ana")
    db.commit()
    return {"session": chat.id, "turn": chat.turns[0].id}


def run(settings: Settings, *argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    review_cli.register(parser.add_subparsers())
    args = parser.parse_args(["review", *argv])
    buffer = io.StringIO()
    code = review_cli.run(args, settings, Console(file=buffer, width=200, color_system=None))
    return code, buffer.getvalue()


def test_sessions_table_and_filters(settings: Settings, seeded: dict) -> None:
    code, out = run(settings, "sessions")
    assert code == 0 and seeded["session"] in out and "Sessions (1 match)" in out
    code, out = run(settings, "sessions", "--score", "0")
    assert code == 0 and "Sessions (0 match)" in out and seeded["session"] not in out
    code, out = run(settings, "sessions", "--since", "soon")
    assert code == 2 and "since must be an ISO date" in out


def test_session_turn_and_stats(settings: Settings, seeded: dict) -> None:
    code, out = run(settings, "session", str(seeded["session"]))
    assert code == 0 and "read_file" in out and "line 0: buy milk" in out
    code, out = run(settings, "turn", str(seeded["turn"]))
    assert code == 0 and "\\boxed{1}" in out and "Label -1 by ana" in out and "Quote the file." in out
    code, out = run(settings, "stats")
    assert code == 0 and "Judge agreement with human labels: 0% over 1 turns" in out


def test_json_output_and_unknown_ids(settings: Settings, seeded: dict) -> None:
    code, out = run(settings, "--json", "turn", str(seeded["turn"]))
    assert code == 0 and json.loads(out)["label"]["author"] == "ana"
    assert run(settings, "turn", "424242") == (1, "No turn 424242.\n")
    code, out = run(settings, "session", "nope")
    assert code == 1 and "No session 'nope'" in out
