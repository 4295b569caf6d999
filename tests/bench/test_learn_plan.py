"""How `bench learn` arguments become a plan: sizes, users and learner overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.learn.runner import parse, plan_from
from bench.learn.server import child_settings
from bench.learn.users import control_for
from core.settings import Settings


def test_quick_is_one_user_off_and_combined() -> None:
    plan = plan_from(parse(["--quick"]))
    assert (plan.users, plan.methods, plan.interactions) == (("student",), ("off", "combined"), 32)
    assert plan_from(parse(["--quick", "--temperature", "0.8"])).temperature == 0.8


def test_lockstep_talks_in_one_session_at_a_time_and_a_plain_run_in_four() -> None:
    plain, lockstep = plan_from(parse(["--quick"])), plan_from(parse(["--quick", "--lockstep"]))
    assert (plain.lockstep, plain.concurrency) == (False, 4)
    assert (lockstep.lockstep, lockstep.concurrency) == (True, 1)
    assert plan_from(parse(["--lockstep"])).concurrency == 1


def test_a_lockstep_server_trains_only_when_asked_and_decodes_one_sequence_at_a_time(tmp_path: Path) -> None:
    base = Settings(data_dir=tmp_path / "caller", model="SmolLM2-135M-Instruct")
    plain = child_settings(base, tmp_path / "plain", method="combined", judge_seed=7)
    lockstep = child_settings(base, tmp_path / "lockstep", method="combined", judge_seed=7, lockstep=True)
    assert (plain.auto_train, plain.max_batch_size, plain.judge_seed) == (True, base.max_batch_size, 7)
    assert (lockstep.auto_train, lockstep.max_batch_size, lockstep.judge_seed) == (False, 1, 7)


def test_the_plain_command_runs_the_headline_settings(tmp_path: Path) -> None:
    """Without --train-config and --temperature, a run uses what the documented figures used."""
    shipped = json.loads((Path(__file__).resolve().parents[2] / "bench/learn/train_configs"
                          / "steps4.json").read_text())
    for argv in ([], ["--quick"]):
        plan = plan_from(parse(argv))
        assert plan.train_config == shipped and plan.train_config["rollouts"] >= 1
        assert plan.temperature == 0.2
    empty = tmp_path / "none.json"
    empty.write_text("{}")
    assert plan_from(parse(["--train-config", str(empty)])).train_config is None  # the learner's defaults


def test_a_train_config_file_is_checked_and_carried_to_every_server(tmp_path: Path) -> None:
    path = tmp_path / "topk.json"
    path.write_text(json.dumps({"opd_mode": "topk", "kl_coef": 0.05}))
    plan = plan_from(parse(["--method", "opd", "--users", "student,brief", "--train-config", str(path)]))
    assert plan.train_config == {"opd_mode": "topk", "kl_coef": 0.05}
    assert plan.users == ("student", "brief") and plan.methods == ("opd",)
    assert plan.eval_users == ("student", "brief")  # no pools of users the run never trains
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


def test_the_full_run_trains_users_whose_neighbours_have_other_rules() -> None:
    """Each user's control is the next user; no two users whose rules reward short prose meet."""
    plan = plan_from(parse([]))
    controls = {user: control_for(plan.users, user) for user in plan.users}
    short = {"student", "brief"}
    assert not any(user in short and control in short for user, control in controls.items())
    assert "teacher" not in plan.users and {"bottomline", "steps"} <= set(plan.users)
