"""`learnproxy export`: JSON Lines and Parquet round trips through `datasets.load_dataset`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from cli import export as export_cli
from core.settings import Settings
from review.export import export_rows
from review.filters import TurnFilters
from tests.utils.factories import judged_session, make_adapter_version, make_label, make_session, make_turn

datasets = pytest.importorskip("datasets")

# The OpenClaw shape: a trailing user message with list content, next to plain string contents.
OPENCLAW_CTX = {
    "role": "user",
    "content": [{"type": "text", "text": "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>"}],
}


@pytest.fixture
def seeded(db: Session) -> dict[str, int]:
    v1 = make_adapter_version(db)
    chat = judged_session(db, n_turns=3, adapter=v1)
    make_label(db, chat.turns[1], value=-1, author="ana")
    make_label(db, chat.turns[1], value=1, hint="Answer from the file.", author="bo")
    side = make_session(db)
    make_turn(
        db,
        side,
        turn_type="side",
        messages=[{"role": "user", "content": "hi"}, OPENCLAW_CTX],
        response_logprobs=[-0.1, float("-inf"), -0.3, -0.4],
    )
    db.commit()
    return {"version": v1.id, "labeled": chat.turns[1].id}


def run_export(settings: Settings, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    export_cli.register(parser.add_subparsers())
    args = parser.parse_args(["export", *argv])
    return int(args.func(args, settings))


def load(kind: str, path: Path, cache: Path) -> list[dict]:
    dataset = datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=str(cache))
    return list(dataset)


def test_jsonl_round_trip_through_datasets(settings: Settings, seeded: dict, tmp_path: Path) -> None:
    out = tmp_path / "turns.jsonl"
    assert run_export(settings, "--format", "jsonl", "-o", str(out)) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    rows = load("json", out, tmp_path / "hf")
    assert len(rows) == len(lines) == 4
    required = {
        "session_id",
        "turn_index",
        "turn_type",
        "messages",
        "tools",
        "response",
        "tool_calls",
        "prompt_token_ids",
        "response_token_ids",
        "response_logprobs",
        "next_state",
        "adapter_version",
        "finish_reason",
        "score",
        "score_source",
        "votes",
        "hint",
        "label",
    }
    assert required <= set(rows[0])
    first = rows[0]
    assert first["prompt_token_ids"] == list(range(1, 41)) and first["response_token_ids"] == [
        101,
        102,
        103,
        104,
    ]
    assert first["response_logprobs"] == [-0.5] * 4
    assert first["adapter_version"] == seeded["version"] and first["score"] == 1
    assert [v["score"] for v in first["votes"] if v["kind"] == "prm"] == [1, 1, -1]
    assert first["hint"] == "Read the file before answering."
    labeled = next(r for r in rows if r["turn_id"] == seeded["labeled"])
    assert labeled["label"]["value"] == 1 and labeled["label"]["author"] == "bo"  # the newest label
    assert lines[-1]["messages"][-1] == OPENCLAW_CTX  # JSON Lines keeps list content exactly
    assert lines[-1]["response_logprobs"] == [
        pytest.approx(-0.1),
        None,
        pytest.approx(-0.3),
        pytest.approx(-0.4),
    ]


def test_parquet_round_trip_through_datasets(settings: Settings, seeded: dict, tmp_path: Path) -> None:
    out = tmp_path / "turns.parquet"
    assert run_export(settings, "--format", "parquet", "-o", str(out), "--batch-size", "2") == 0
    rows = load("parquet", out, tmp_path / "hf")
    assert [r["turn_index"] for r in rows] == [0, 1, 2, 0]
    assert json.loads(rows[3]["messages"])[-1] == OPENCLAW_CTX
    assert json.loads(rows[0]["tool_calls"])[0]["function"]["name"] == "read_file"
    assert rows[1]["label"] == {
        "value": 1,
        "hint": "Answer from the file.",
        "author": "bo",
        "created_at": rows[1]["label"]["created_at"],
    }
    assert rows[0]["label"] is None and rows[0]["prompt_token_ids"] == list(range(1, 41))


def test_export_filters_and_batches(
    settings: Settings, seeded: dict, tmp_path: Path, session_factory: sessionmaker[Session]
) -> None:
    everything = [r["turn_id"] for r in export_rows(session_factory, TurnFilters(), batch_size=1000)]
    in_pairs = [r["turn_id"] for r in export_rows(session_factory, TurnFilters(), batch_size=2)]
    assert in_pairs == everything == sorted(everything) and len(everything) == 4
    out = tmp_path / "main.jsonl"
    assert (
        run_export(settings, "-o", str(out), "--turn-type", "main", "--score", "1", "--since", "2000-01-01")
        == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["turn_type"], r["score"]) for r in rows] == [("main", 1), ("main", 1)]
    assert run_export(settings, "-o", str(out), "--labeled") == 0
    assert [json.loads(line)["turn_id"] for line in out.read_text().splitlines()] == [seeded["labeled"]]


def test_export_refuses_bad_input(
    settings: Settings, seeded: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_export(settings, "--since", "last tuesday") == 2
    assert "since must be an ISO date" in capsys.readouterr().err
    assert run_export(settings, "--format", "parquet") == 2
    assert "needs --output" in capsys.readouterr().err
