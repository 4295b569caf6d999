"""How `bench learn` arguments become a plan: sizes, users and learner overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.learn.runner import parse, plan_from


def test_quick_is_one_user_off_and_combined() -> None:
    plan = plan_from(parse(["--quick"]))
    assert (plan.users, plan.methods, plan.interactions) == (("student",), ("off", "combined"), 32)
    assert plan.train_config is None


def test_a_train_config_file_is_checked_and_carried_to_every_server(tmp_path: Path) -> None:
    path = tmp_path / "topk.json"
    path.write_text(json.dumps({"opd_mode": "topk", "kl_coef": 0.05}))
    plan = plan_from(parse(["--method", "opd", "--users", "student,brief", "--train-config", str(path)]))
    assert plan.train_config == {"opd_mode": "topk", "kl_coef": 0.05}
    assert plan.users == ("student", "brief") and plan.methods == ("opd",)
    path.write_text(json.dumps({"opd_mod": "topk"}))
    with pytest.raises(ValueError, match="unknown TrainConfig fields"):
        plan_from(parse(["--train-config", str(path)]))


def test_settings_the_server_owns_are_refused_in_a_train_config(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"batch_size": 4}))
    with pytest.raises(SystemExit, match="LEARNPROXY_TRAIN_BATCH_SIZE"):
        plan_from(parse(["--train-config", str(path)]))


def test_a_tag_must_be_safe_in_file_names() -> None:
    from bench.learn.runner import main
    from core.settings import Settings

    with pytest.raises(SystemExit, match="--tag"):
        main(["--tag", "../x", "--merge", "nothing.json"], Settings())
