"""Tables, PNG plots and raw JSON for the learning benchmark.

`render(results)` returns the markdown section for docs/BENCHMARKS.md; `write(results, out_dir)`
saves the raw results under `learn_results/` and one plot per user under `img/`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

IMPROVEMENT_MARGIN = 0.1  # a rise of at least this much over the base counts as an improvement


def tag(results: dict[str, Any]) -> str:
    variant = results.get("variant") or ""
    return f"learn_{results.get('mode', 'full')}{'_' + variant if variant else ''}_seed{results['plan']['seeds'][0]}"


def _runs(results: dict[str, Any], method: str, user: str) -> list[dict[str, Any]]:
    trained_on = None if method == "off" else user
    return [r for r in results["runs"] if r["method"] == method and r["trained_on"] == trained_on]


def _value(point: dict[str, Any], user: str) -> float | None:
    ev = point["evals"].get(user)
    return None if ev is None else float(ev["satisfaction"])


def curve(run: dict[str, Any], user: str) -> list[tuple[int, float]]:
    """(interactions, satisfaction on `user`'s held-out pool) for each evaluated version of a run."""
    return [(p["interactions"], v) for p in run["points"] if (v := _value(p, user)) is not None]


def at(points: list[tuple[int, float]], x: int, *, last: bool = False) -> float | None:
    """The satisfaction of the version served after `x` interactions (a step function). `last`
    takes the run's final version: sessions end whole, so a run can overshoot its planned count."""
    seen = [v for px, v in points if px <= x or last]
    return seen[-1] if seen else None


def first_improvement(points: list[tuple[int, float]]) -> int | None:
    if not points:
        return None
    base = points[0][1]
    return next((x for x, v in points[1:] if v >= base + IMPROVEMENT_MARGIN), None)


def _mean(values: Sequence[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.mean(clean) if clean else None


def _fmt(v: float | None, whole: bool = False) -> str:
    return "—" if v is None else f"{v:.0f}" if whole else f"{v:.2f}"


def _specific_gains(results: dict[str, Any], method: str, user: str) -> tuple[list[float], int]:
    """Each seed's target-minus-control final rate on `user`'s rule, and how many target runs there
    were: a seed whose control run is missing (a merge of runs with different --users) has no gain."""
    from bench.learn.users import control_for

    control = control_for(results["plan"]["users"], user)
    targets = _runs(results, method, user)
    if control is None or method == "off":
        return [], len(targets)
    gains: list[float] = []
    for target in targets:
        ctrl = [r for r in _runs(results, method, control) if r["seed"] == target["seed"]]
        t_curve, c_curve = curve(target, user), curve(ctrl[0], user) if ctrl else []
        if t_curve and c_curve:
            gains.append(t_curve[-1][1] - c_curve[-1][1])
    return gains, len(targets)


def specific_gain(results: dict[str, Any], method: str, user: str) -> float | None:
    """Target run's final held-out rate on `user`'s rule minus the control run's, mean over seeds."""
    return _mean(_specific_gains(results, method, user)[0])


def _gain_cell(results: dict[str, Any], method: str, user: str) -> str:
    """The specific gain, saying so when some seeds had no control run to subtract."""
    gains, n = _specific_gains(results, method, user)
    cell = _fmt(_mean(gains))
    return cell if not gains or len(gains) == n else f"{cell} ({len(gains)} of {n} seeds have a control)"


def gain_over_off(results: dict[str, Any], method: str, user: str) -> float | None:
    """Final held-out rate of the runs trained on `user` minus the untouched base's final rate."""
    if method == "off":
        return None
    base = _mean([c[-1][1] if (c := curve(r, user)) else None for r in _runs(results, "off", user)])
    target = _mean([c[-1][1] if (c := curve(r, user)) else None for r in _runs(results, method, user)])
    return None if base is None or target is None else target - base


def _methods(results: dict[str, Any]) -> list[str]:
    return list(results["plan"]["methods"])


def _grid(plan: dict[str, Any]) -> list[int]:
    """The interaction counts the tables and plots report on: every block, and the end."""
    return sorted({0, *range(plan["eval_every"], plan["interactions"] + 1, plan["eval_every"]),
                   plan["interactions"]})


def user_table(results: dict[str, Any], user: str) -> str:
    plan = results["plan"]
    grid = _grid(plan)
    methods = _methods(results)
    lines = ["| interactions | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for x in grid:
        cells = [_fmt(_mean([at(curve(r, user), x, last=x == grid[-1]) for r in _runs(results, m, user)]))
                 for m in methods]
        lines.append(f"| {x} | " + " | ".join(cells) + " |")
    firsts = []
    for m in methods:
        xs = [first_improvement(curve(r, user)) for r in _runs(results, m, user)]
        found = [x for x in xs if x is not None]
        median = f"{statistics.median(found):.0f}" if found else "never"
        firsts.append(f"{median} ({len(found)}/{len(xs)} runs)")
    gains = [_gain_cell(results, m, user) for m in methods]
    over_off = [_fmt(gain_over_off(results, m, user)) for m in methods]
    lines.append("| first improvement | " + " | ".join(firsts) + " |")
    lines.append("| gain over off (final) | " + " | ".join(over_off) + " |")
    lines.append("| specific gain (minus control) | " + " | ".join(gains) + " |")
    for key, label in (("guard_rate", "quality guard (final)"), ("rule_rate", "rule alone, guard or not (final)"),
                       ("mean_words", "mean words per reply (final)")):
        finals = [_mean([_final_eval(r, user, key) for r in _runs(results, m, user)]) for m in methods]
        lines.append(f"| {label} | " + " | ".join(_fmt(v, key == "mean_words") for v in finals) + " |")
    return "\n".join(lines)


def _final_eval(run: dict[str, Any], user: str, key: str) -> float | None:
    for p in reversed(run["points"]):
        if user in p["evals"]:
            value = p["evals"][user].get(key)
            return None if value is None else float(value)
    return None


def run_name(run: dict[str, Any]) -> str:
    return f"{run['method']} / {run['trained_on'] or 'all users'} / seed {run['seed']}"


def judge_table(results: dict[str, Any]) -> str:
    lines = ["| run | interactions | gold bad | judge agrees (all) | agrees (decided) | decided by |",
             "|---|---|---|---|---|---|"]
    for r in results["runs"]:
        j = r.get("judge") or {}
        src = ", ".join(f"{k} {v}" for k, v in sorted((j.get("score_source") or {}).items()))
        name = run_name(r)
        lines.append(f"| {name} | {j.get('n', 0)} | {_fmt(j.get('gold_bad_rate'))} | "
                     f"{_fmt(j.get('agreement'))} | {_fmt(j.get('agreement_decided'))} | {src or '—'} |")
    return "\n".join(lines)


def hinted_table(results: dict[str, Any]) -> str:
    base, hinted = results.get("baseline") or {"evals": {}}, results.get("hinted") or {}
    lines = ["| user | base | base with the hint in the prompt | guard pass (hinted) |", "|---|---|---|---|"]
    for user, ev in hinted.items():
        b = base["evals"].get(user, {}).get("satisfaction")
        lines.append(f"| {user} | {_fmt(b)} | {_fmt(ev['satisfaction'])} | {_fmt(ev['guard_rate'])} |")
    return "\n".join(lines)


def rollback_table(results: dict[str, Any]) -> str | None:
    """Versions the learner rolled back (learner/regression.py), with the judged means that decided it."""
    rows = []
    for r in results["runs"]:
        name = run_name(r)
        for rb in r.get("rolled_back") or []:
            check = rb.get("check") or {}
            mine, parent = check.get("version") or {}, check.get("parent") or {}
            rows.append(f"| {name} | v{rb['version']} | {'v' + str(rb['parent']) if rb['parent'] else 'base'} | "
                        f"{_fmt(mine.get('mean'))} ({mine.get('n', '—')}) | "
                        f"{_fmt(parent.get('mean'))} ({parent.get('n', '—')}) |")
    if not rows:
        return None
    return "\n".join(["| run | rolled back | served again | its mean judged score (turns) | "
                      "parent's (turns) |", "|---|---|---|---|---|", *rows])


def rejected_table(results: dict[str, Any]) -> str | None:
    """Versions the publish check kept from serving (learner/publish_check.py)."""
    rows = []
    for r in results["runs"]:
        name = run_name(r)
        for rj in r.get("rejected") or []:
            rows.append(f"| {name} | v{rj['version']} | {'v' + str(rj['parent']) if rj['parent'] else 'base'} | "
                        f"{rj['failed']} of {rj['n']} | {rj['base_failed']} of {rj['n']} |")
    if not rows:
        return None
    return "\n".join(["| run | rejected | trained from | its replies failed | the base model's failed |",
                      "|---|---|---|---|---|", *rows])


def render(results: dict[str, Any], img_dir: str = "img") -> str:
    """The markdown section: one table per user, the judge's reliability, the hinted ceiling."""
    from bench.learn.users import all_users

    plan, guard = results["plan"], results["guard"]
    users = all_users()
    seeds = ", ".join(map(str, plan["seeds"]))
    out = ["### Learning from simulated users", "",
           f"Command: `{results['command']}` · seeds {seeds} · {plan['interactions']} training "
           f"interactions per run · {results.get('elapsed_s', 0):.0f} s in all. Held-out satisfaction is the "
           f"user's own rule on replies that pass the quality guard, greedy, as side turns; `off` is the "
           f"untouched base. Raw results: `docs/learn_results/{tag(results)}.json`.", ""]
    if plan.get("train_config"):  # the file named in the command may be gone; its content is not
        out += [f"Learner overrides (`--train-config`): `{json.dumps(plan['train_config'], sort_keys=True)}`.", ""]
    errors = [f"{r['method']}/{r['trained_on']}/seed {r['seed']}: {r['error']}"
              for r in results["runs"] if r["error"]]
    if errors:
        out += ["**Runs that failed:** " + "; ".join(errors), ""]
    for user in plan["users"]:
        metric = "valid first tool call rate" if users[user].tools else "satisfaction"
        out += [f"#### {user}: {users[user].description}", "",
                f"Held-out {metric} against interactions (mean over seeds).", "",
                user_table(results, user), "", f"![{user}]({img_dir}/{tag(results)}_{user}.png)", ""]
    rollbacks = rollback_table(results)
    if rollbacks:
        out += ["#### Versions rolled back (the judge scored their turns below their parent's)", "", rollbacks, ""]
    rejected = rejected_table(results)
    if rejected:
        out += ["#### Versions never served (their replies to recent or canary requests failed the publish check)", "",
                rejected, ""]
    out += ["#### Hinted-teacher compliance (the ceiling of hint distillation)", "",
            hinted_table(results), "",
            "#### Judge against the simulator's ground truth (training turns)", "", judge_table(results), "",
            f"Quality guard: all-MiniLM-L6-v2 relevance ≥ {guard['threshold']:.3f} plus length, echo, "
            f"repetition and no-answer checks{_keyed(guard)}; threshold fitted on {guard['n_fit']} hand-labelled "
            f"examples (accuracy {guard['accuracy_fit']:.2f}), {guard['accuracy_heldout']:.2f} on "
            f"{guard['n_heldout']} others it never saw.{_on_replies(guard)}", "",
            f"Limits: {len(plan['seeds'])} seed(s), {plan['heldout_per_user'] or 'all'} held-out prompts per "
            f"user (one prompt moves a rate by 1/n), {plan['max_tokens']}-token replies from SmolLM2-135M on "
            f"CPU, training turns sampled at temperature {plan['temperature']}; the judge is the same 135M "
            "model behind the reaction classifier."]
    return "\n".join(out)


def _on_replies(guard: dict[str, Any]) -> str:
    """The guard against replies of earlier runs labelled by reading (results from before lack it)."""
    if not guard.get("replies_n"):
        return ""
    return (f" On {guard['replies_n']} replies of earlier runs, labelled by reading whether they answer, it "
            f"agrees {guard['replies_accuracy']:.2f} (most of those replies do not answer): it passes "
            f"{guard['replies_pass_nonanswers']:.2f} of the non-answers and fails "
            f"{guard['replies_fail_answers']:.2f} of the answers. `scripts/regrade.py` counts the satisfied replies "
            "that were read as answers.")


def _keyed(guard: dict[str, Any]) -> str:
    n = guard.get("answer_keys", 0)
    return f", and answer keys that a reply must name one of for {n} questions" if n else ""


def _nan(v: float | None) -> float:
    return float("nan") if v is None else v


def plot(results: dict[str, Any], user: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    grid = _grid(results["plan"])
    for k, method in enumerate(_methods(results)):
        runs = _runs(results, method, user)
        for run in runs if len(runs) > 1 else []:  # each seed faintly, the mean boldly
            ys = [_nan(at(curve(run, user), x, last=x == grid[-1])) for x in grid]
            ax.plot(grid, ys, color=f"C{k}", alpha=0.25, linewidth=1)
        mean = [_mean([at(curve(r, user), x, last=x == grid[-1]) for r in runs]) for x in grid]
        if any(v is not None for v in mean):
            ax.plot(grid, [_nan(v) for v in mean], color=f"C{k}", marker="o", linewidth=2, label=method)
    ax.set(xlabel="training interactions", ylabel="held-out satisfaction", ylim=(-0.02, 1.02),
           title=f"{user} (seeds {', '.join(map(str, results['plan']['seeds']))})")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a user not trained on yet (mid-run rewrite) has no line
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


METHODS = ("off", "rl", "opd", "combined")  # in the order tables show them
MERGE_FREE = ("seeds", "methods")  # the only plan fields merged runs may differ in


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from several runs of the same plan with different seeds or methods (for the headline
    means and the method comparison). Runs under different settings would mix what they measure, so
    any other difference in their plans is refused."""
    first = parts[0]
    for part in parts[1:]:
        differ = sorted(k for k in {*first["plan"], *part["plan"]} - set(MERGE_FREE)
                        if first["plan"].get(k) != part["plan"].get(k))
        if differ:
            raise ValueError(f"cannot merge runs whose plans differ in {', '.join(differ)}: "
                             f"{first['command']!r} and {part['command']!r}")
    seeds = sorted({s for p in parts for s in p["plan"]["seeds"]})
    methods = sorted({m for p in parts for m in p["plan"]["methods"]}, key=METHODS.index)
    plan = {**first["plan"], "seeds": seeds, "methods": methods}
    return {**first, "mode": "merged", "plan": plan, "command": "; ".join(p["command"] for p in parts),
            "runs": [r for p in parts for r in p["runs"]],
            "elapsed_s": sum(p.get("elapsed_s", 0.0) for p in parts)}


def write(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Save the raw JSON and the plots; returns the paths written."""
    name = tag(results)
    raw = out_dir / "learn_results" / f"{name}.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(results, indent=1, default=str))
    written = [raw]
    for user in results["plan"]["users"]:
        path = out_dir / "img" / f"{name}_{user}.png"
        plot(results, user, path)
        written.append(path)
    # the copy beside the JSON links the plots from learn_results/, one folder down
    (out_dir / "learn_results" / f"{name}.md").write_text(render(results, img_dir="../img") + "\n")
    return written
