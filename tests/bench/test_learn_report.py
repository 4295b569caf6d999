"""The report: tables, specific gain, first improvement, plots and raw JSON from a results dict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.learn import report


def _point(x: int, version: int | None, rates: dict[str, float]) -> dict[str, Any]:
    evals = {u: {"satisfaction": r, "guard_rate": 0.95, "rule_rate": r, "n": 8} for u, r in rates.items()}
    return {"interactions": x, "version": version, "model": "learnproxy", "evals": evals}


def _run(method: str, user: str | None, seed: int, points: list[dict[str, Any]]) -> dict[str, Any]:
    judge = {"n": 64, "agreement": 0.8, "agreement_decided": 0.9, "gold_bad_rate": 0.7,
             "score_source": {"reaction": 50, "votes": 14}}
    return {"method": method, "trained_on": user, "seed": seed, "points": points, "error": None,
            "interactions": 64, "judge": judge}


def results() -> dict[str, Any]:
    base = _point(0, None, {"student": 0.0, "teacher": 0.0})
    runs = [_run("off", None, 0, [base, _point(16, None, {"student": 0.0, "teacher": 0.0})])]
    for seed, lift in [(0, 0.75), (1, 0.5)]:
        flat = {"student": 0.0, "teacher": 0.0}
        runs.append(_run("combined", "student", seed, [
            base, _point(16, 1, flat), _point(32, 2, {"student": lift, "teacher": 0.0})]))
        other = {"student": 0.25, "teacher": 0.125}
        runs.append(_run("combined", "teacher", seed, [base, _point(16, 1, other), _point(32, 2, other)]))
    plan = {"users": ["student", "teacher"], "eval_users": ["student", "teacher"],
            "methods": ["off", "combined"], "seeds": [0, 1], "interactions": 32, "eval_every": 16,
            "off_interactions": 8, "heldout_per_user": 8, "max_tokens": 48, "temperature": 0.8,
            "concurrency": 4, "version_wait_s": 60.0}
    guard = {"threshold": 0.26, "accuracy_fit": 1.0, "accuracy_heldout": 0.96, "n_fit": 27, "n_heldout": 27}
    return {"command": "learnproxy bench learn --method combined --seed 0", "plan": plan, "runs": runs,
            "guard": guard, "baseline": base, "hinted": {"student": {"satisfaction": 0.5, "guard_rate": 1.0}},
            "elapsed_s": 100.0}


def test_specific_gain_is_target_minus_control_mean_over_seeds() -> None:
    r = results()
    # student: seed 0 0.75-0.25, seed 1 0.5-0.25 -> mean 0.375; teacher's control is the student run.
    assert report.specific_gain(r, "combined", "student") == 0.375
    assert report.specific_gain(r, "combined", "teacher") == 0.125
    assert report.specific_gain(r, "off", "student") is None
    assert report.gain_over_off(r, "combined", "student") == 0.625
    assert report.gain_over_off(r, "combined", "teacher") == 0.125


def test_first_improvement_and_step_lookup() -> None:
    pts = [(0, 0.0), (16, 0.05), (32, 0.5)]
    assert report.first_improvement(pts) == 32
    assert report.first_improvement([(0, 0.5), (16, 0.5)]) is None
    assert report.at(pts, 20) == 0.05 and report.at(pts, 32) == 0.5


def test_render_has_a_table_per_user_and_the_command() -> None:
    md = report.render(results())
    assert md.startswith("### ")
    assert "learnproxy bench learn --method combined --seed 0" in md
    assert "#### student" in md and "#### teacher" in md
    assert "| 32 | 0.00 | 0.62 |" in md  # off stays at the base; combined is the seed mean at 32
    assert "| specific gain (minus control) | — | 0.38 |" in md
    assert "| gain over off (final) | — | 0.62 |" in md  # mean of 0.75 and 0.5 over the base's 0.00
    assert "Limits:" in md


def test_write_saves_json_plots_and_markdown(tmp_path: Path) -> None:
    paths = report.write(results(), tmp_path)
    raw = json.loads(paths[0].read_text())
    assert raw["plan"]["seeds"] == [0, 1]
    pngs = [p for p in paths if p.suffix == ".png"]
    assert len(pngs) == 2
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000 for p in pngs)
    markdown = (tmp_path / "learn_results" / f"{report.tag(raw)}.md").read_text()
    for png in pngs:  # each plot link resolves from the markdown file's own folder
        link = f"../img/{png.name}"
        assert f"]({link})" in markdown and (paths[0].parent / link).resolve() == png.resolve()


def test_merge_joins_seeds_from_separate_runs() -> None:
    r = results()
    one = {**r, "plan": {**r["plan"], "seeds": [0]}, "runs": [x for x in r["runs"] if x["seed"] == 0]}
    two = {**r, "plan": {**r["plan"], "seeds": [1]}, "runs": [x for x in r["runs"] if x["seed"] == 1],
           "command": "learnproxy bench learn --seed 1"}
    merged = report.merge([one, two])
    assert merged["plan"]["seeds"] == [0, 1] and merged["mode"] == "merged"
    assert report.specific_gain(merged, "combined", "student") == 0.375
    assert "--seed 1" in report.render(merged)


def test_a_seed_without_a_control_run_is_named_not_averaged_in_silently() -> None:
    r = results()
    r["runs"] = [x for x in r["runs"] if not (x["trained_on"] == "teacher" and x["seed"] == 1)]
    # student's seed 1 lost its control (the teacher-trained run): only seed 0's 0.75-0.25 counts
    assert report.specific_gain(r, "combined", "student") == 0.5
    assert "| specific gain (minus control) | — | 0.50 (1 of 2 seeds have a control) |" in report.render(r)


def test_the_last_row_shows_the_final_version_even_after_an_overshoot() -> None:
    r = results()
    for run in r["runs"]:
        if run["method"] == "combined":
            run["points"][-1]["interactions"] = 35  # the last sessions ended past the planned 32
    assert "| 32 | 0.00 | 0.62 |" in report.render(r)


def test_a_variant_gets_its_own_file_names() -> None:
    from bench.learn.report import tag

    plan = {"seeds": [3]}
    assert tag({"mode": "full", "plan": plan}) == "learn_full_seed3"
    assert tag({"mode": "full", "variant": "topk", "plan": plan}) == "learn_full_topk_seed3"


def test_render_names_the_learner_overrides_of_a_variant() -> None:
    r = results()
    assert "Learner overrides" not in report.render(r)
    r["plan"]["train_config"] = {"opd_mode": "topk"}
    assert 'Learner overrides (`--train-config`): `{"opd_mode": "topk"}`.' in report.render(r)


def test_render_lists_rolled_back_versions_only_when_there_are_some() -> None:
    r = results()
    assert "rolled back" not in report.render(r)
    check = {"version": {"version_id": 2, "n": 9, "mean": -0.56}, "parent": {"version_id": 1, "n": 11, "mean": 0.27},
             "margin": 0.5, "min_turns": 8}
    r["runs"][1]["rolled_back"] = [{"version": 2, "parent": 1, "check": check}]
    md = report.render(r)
    assert "#### Versions rolled back" in md
    assert "| combined / student / seed 0 | v2 | v1 | -0.56 (9) | 0.27 (11) |" in md


def test_merge_puts_methods_side_by_side_in_their_order() -> None:
    r = results()
    combined = {**r, "plan": {**r["plan"], "methods": ["combined"]},
                "runs": [x for x in r["runs"] if x["method"] == "combined"]}
    off = {**r, "plan": {**r["plan"], "methods": ["off"]}, "runs": [x for x in r["runs"] if x["method"] == "off"],
           "command": "learnproxy bench learn --method off"}
    merged = report.merge([combined, off])
    assert merged["plan"]["methods"] == ["off", "combined"]
    assert "| interactions | off | combined |" in report.render(merged)
    assert report.specific_gain(merged, "combined", "student") == report.specific_gain(r, "combined", "student")


def test_merge_refuses_runs_under_different_settings() -> None:
    r = results()
    other = {**r, "plan": {**r["plan"], "interactions": r["plan"]["interactions"] * 2, "seeds": [5]}}
    with pytest.raises(ValueError, match="interactions"):
        report.merge([r, other])


def test_merge_from_the_command_line_names_its_files_by_tag(tmp_path: Path) -> None:
    from bench.learn.runner import main
    from core.settings import Settings

    r = results()
    parts = []
    for seed in (0, 1):
        path = tmp_path / f"seed{seed}.json"
        path.write_text(json.dumps({**r, "plan": {**r["plan"], "seeds": [seed]},
                                    "runs": [x for x in r["runs"] if x["seed"] == seed]}))
        parts.append(str(path))
    main(["--merge", *parts, "--tag", "both", "--out", str(tmp_path)], Settings())
    merged = json.loads((tmp_path / "learn_results" / "learn_merged_both_seed0.json").read_text())
    assert merged["plan"]["seeds"] == [0, 1] and merged["variant"] == "both"

    clash = tmp_path / "clash.json"
    clash.write_text(json.dumps({**r, "plan": {**r["plan"], "max_tokens": 96}}))
    with pytest.raises(SystemExit, match="max_tokens"):
        main(["--merge", parts[0], str(clash), "--out", str(tmp_path)], Settings())


def test_render_lists_versions_the_publish_check_rejected_only_when_there_are_some() -> None:
    r = results()
    assert "Versions never served" not in report.render(r)
    r["runs"][1]["rejected"] = [{"version": 3, "parent": None, "failed": 3, "base_failed": 1, "n": 8}]
    md = report.render(r)
    assert "#### Versions never served" in md
    assert "| combined / student / seed 0 | v3 | base | 3 of 8 | 1 of 8 |" in md
