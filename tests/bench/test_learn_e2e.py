"""A tiny `bench learn --quick` end to end: a real `learnproxy serve --with-worker`, real model, real
judge and learner, driven over HTTP by the simulated student."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from bench.learn.runner import main
from core.settings import Settings


@pytest.mark.slow
def test_tiny_quick_run_end_to_end(tmp_path: Path, model_path: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "models").symlink_to(Path(model_path).parent.resolve())  # the converted model, not again
    # Small settings so a few interactions make a training batch and the 135M judge answers quickly.
    settings = Settings(data_dir=data, train_batch_size=1, judge_votes=1, judge_max_tokens=48)
    # One step a batch: the harness is under test here, not how much a version learns.
    train_config = tmp_path / "train_config.json"
    train_config.write_text(json.dumps({"rollouts": 1, "rollout_complaints": False, "steps_per_batch": 1}))
    out = tmp_path / "out"
    # On 2 shared cores the 135M judge takes up to a minute a turn: give the first version time to come.
    argv = ["--quick", "--interactions", "2", "--heldout", "2", "--version-wait", "600",
            "--train-config", str(train_config), "--out", str(out), "--keep", str(tmp_path / "runs")]
    rc = main(argv, settings)

    raw = json.loads((out / "learn_results" / "learn_quick_seed0.json").read_text())
    runs = {r["method"]: r for r in raw["runs"]}
    assert set(runs) == {"off", "combined"}
    assert rc == 0, [r["error"] for r in raw["runs"]]
    assert raw["baseline"]["evals"]["student"]["n"] == 2
    combined = runs["combined"]
    assert combined["interactions"] >= 2  # one session of 2 to 4 turns
    judge = combined["judge"]
    assert judge["n"] == combined["interactions"]
    assert judge["text_mismatch"] == 0  # the DB turns line up with what the simulated user saw
    assert judge["decided"] >= 1, judge  # the judge scored at least one training turn
    assert len(combined["points"]) >= 2, "no adapter version was served after the training turns"
    assert combined["points"][-1]["version"] is not None
    for point in [*combined["points"][1:], *runs["off"]["points"][1:]]:  # each waited for the judge first
        assert isinstance(point["judge_pending"], int) and point["judge_wait_s"] >= 0, point
    assert (out / "img" / "learn_quick_seed0_student.png").stat().st_size > 5000
    assert "### " in (out / "learn_results" / "learn_quick_seed0.md").read_text()
    # --keep leaves each run's data folder, DB included, for inspection
    db = tmp_path / "runs" / "combined-student-s0" / "learnproxy.db"
    assert db.stat().st_size > 0
    # --train-config reached the server's learner: every version was trained with the one step it sets
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        configs = [json.loads(c) for (c,) in conn.execute("SELECT config FROM adapter_versions")]
    assert configs and {c["steps_per_batch"] for c in configs} == {1}, configs
