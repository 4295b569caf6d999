"""Judge-reliability figures, the shipped labelled set and the `judge-eval` command."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy.orm import Session

from cli.judge_eval import DEFAULT_LABELS, register, run
from core.models import Label, Turn
from core.settings import Settings
from judges.evaluate import evaluate_cases, evaluate_db, load_cases, metrics
from tests.judges.conftest import add_turn


def test_metrics_against_a_hand_computed_example() -> None:
    # gold -1: judged -1,-1,0 | gold 0: judged 0 | gold 1: judged -1,1,1,1
    gold = [-1, -1, -1, 0, 1, 1, 1, 1]
    judged = [-1, -1, 0, 0, -1, 1, 1, 1]
    m = metrics(gold, judged, unparsed=1)
    assert m["matrix"] == [[2, 1, 0], [0, 1, 0], [1, 0, 3]]
    assert m["accuracy"] == pytest.approx(6 / 8)
    assert m["leniency"] == pytest.approx(1 / 3)  # one of three mistakes let through
    assert m["strictness"] == pytest.approx(1 / 5)  # one of five fine turns called a mistake
    assert m["precision_neg"] == pytest.approx(2 / 3)
    assert m["kappa"] == pytest.approx((0.75 - 23 / 64) / (1 - 23 / 64))
    assert m["unparsed_rate"] == pytest.approx(1 / 8)
    assert m["baseline_accuracy"] == pytest.approx(4 / 8)
    always = metrics(gold, [1] * 8)
    assert always["leniency"] == 1.0 and always["kappa"] == pytest.approx(0.0)


def test_the_shipped_labelled_set() -> None:
    cases = load_cases(DEFAULT_LABELS)
    assert len(cases) >= 60
    labels = [c.gold for c in cases]
    assert {labels.count(v) >= 10 for v in (-1, 0, 1)} == {True}
    assert len({c.id for c in cases}) == len(cases)
    assert sum(any(m.get("role") == "tool" for m in c.inp.next_state) for c in cases) >= 20
    assert sum(c.inp.user_reply is not None for c in cases) >= 30


def test_signal_stage_alone_on_the_shipped_set_is_precise_but_lenient(settings: Settings) -> None:
    report = evaluate_cases(load_cases(DEFAULT_LABELS), "signal", settings, None)
    m = report.metrics()
    assert m["precision_neg"] == 1.0  # every signal is a real failure
    assert 0.2 < m["leniency"] < 0.8  # corrections and wordless failures slip through
    assert report.sources["signal"] == 9  # the nine failures printed in a shape signals know


def test_from_db_compares_stored_scores_with_the_newest_label(db: Session) -> None:
    agree = add_turn(db, next_state=[{"role": "user", "content": "thanks"}])
    disagree = add_turn(db, next_state=[{"role": "user", "content": "no"}])
    add_turn(db, next_state=[{"role": "user", "content": "ok"}])  # judged but never labelled
    for turn_id, score in ((agree, 1), (disagree, 1)):
        turn = db.get(Turn, turn_id)
        assert turn is not None
        turn.score = score
    db.add_all([Label(turn_id=agree, value=1, author="ana"), Label(turn_id=disagree, value=1, author="ana"),
                Label(turn_id=disagree, value=-1, author="bo")])  # the newer label is in force
    db.commit()
    report = evaluate_db(db)
    assert (report.gold, report.judged) == ([1, -1], [1, 1])


def test_judge_eval_command_prints_the_figures(settings: Settings, tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["judge-eval", "--stage", "signal"])
    console = Console(record=True, width=120)
    assert run(args, settings, console) == 0
    out = console.export_text()
    for needle in ("confusion", "leniency", "strictness", "precision of -1", "Cohen's kappa",
                   "unparsed rate", "always +1", "decided by: none="):
        assert needle in out
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert run(parser.parse_args(["judge-eval", "--labels", str(empty)]), settings, console) == 1
