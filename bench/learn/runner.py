"""`learnproxy bench learn`: learning curves of off, rl, opd and combined against simulated users.

For each (method, trained-on user, seed) the runner starts a fresh `learnproxy serve --with-worker`
on the embedded defaults, drives training sessions through it with the `openai` client, and after
each new adapter version evaluates every held-out pool greedily as side turns. After the run it
reads the feedback DB (read-only) to grade the judge against the simulator's ground truth.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from openai import OpenAI

from bench.learn import report
from bench.learn.judging import (
    judge_agreement,
    rejected_versions,
    served_and_rolled_back,
    wait_for_judging,
    wait_for_training,
)
from bench.learn.lockstep import train_ready
from bench.learn.quality import QualityGuard
from bench.learn.server import Server, child_settings
from bench.learn.sim import Chat, Truth, cycle, evaluate, session
from bench.learn.users import Prompt, User, all_users, control_for
from core.modelload import set_torch_threads
from core.settings import Settings

METHODS = report.METHODS
# The full run trains on users whose rule the base model can follow with the hint in its prompt
# (teacher's form it never writes, nor casual's opener with an answer after it: nothing to distill;
# run them with --users). Each user's control is the next one (users.control_for): no two
# neighbours share a rule. Brief is left to --users: its
# rule (short plain prose) is met by any run that learns to be short, bottomline's and student's too.
# Analogy, advice and reassure (run in pairs, each the other's control) are left to --users as
# well, so the default run keeps its documented length.
FULL_USERS = ("student", "bottomline", "steps", "weather")
DOCS = Path(__file__).resolve().parents[2] / "docs"
# The learner settings and sampling temperature of the headline runs in docs/BENCHMARKS.md, so the
# plain command reproduces them; --train-config and --temperature replace them ({} for the learner's
# own defaults).
DEFAULT_TRAIN_CONFIG = Path(__file__).resolve().parent / "train_configs" / "steps4.json"
DEFAULT_TEMPERATURE = 0.2
LOCKSTEP_TRAIN_S = 900.0  # lockstep: the longest wait for a block's judging, and for each batch's version


@dataclass(frozen=True)
class Plan:
    """How big a run is. Training hyperparameters are not here: they belong to the learner."""

    users: tuple[str, ...]  # one training run per user, per method and seed
    eval_users: tuple[str, ...]  # held-out pools checked at every point
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    interactions: int  # training interactions (assistant turns that got a next state) per run
    eval_every: int  # look for a new adapter version after this many interactions
    off_interactions: int  # traffic in the off run, only to measure the judge
    heldout_per_user: int  # 0: the whole held-out pool
    max_tokens: int
    temperature: float  # sampling temperature of training turns
    concurrency: int  # simulated sessions in flight at once
    version_wait_s: float  # how long to wait for a new version after each block
    train_config: dict[str, Any] | None = None  # learner overrides, written as each server's train_config.json
    lockstep: bool = False  # one session at a time, training only between blocks (bench/learn/lockstep.py)

    @classmethod
    def quick(cls, method: str, seed: int) -> Plan:
        methods = ("off", "combined") if method == "all" else (method,)
        return cls(users=("student",), eval_users=("student",), methods=methods, seeds=(seed,),
                   interactions=32, eval_every=8, off_interactions=8, heldout_per_user=8, max_tokens=64,
                   temperature=DEFAULT_TEMPERATURE, concurrency=4, version_wait_s=90.0)

    @classmethod
    def full(cls, method: str, seed: int, n_seeds: int) -> Plan:
        users = FULL_USERS
        methods = METHODS if method == "all" else (method,)
        return cls(users=users, eval_users=users, methods=methods,
                   seeds=tuple(seed + i for i in range(n_seeds)), interactions=64, eval_every=8,
                   off_interactions=16, heldout_per_user=0, max_tokens=64, temperature=DEFAULT_TEMPERATURE,
                   concurrency=4, version_wait_s=120.0)


class Locked:
    """A thread-safe `next()` over an iterator shared by concurrent sessions."""

    def __init__(self, it: Iterator[Prompt]) -> None:
        self._it, self._lock = it, threading.Lock()

    def __iter__(self) -> Locked:
        return self

    def __next__(self) -> Prompt:
        with self._lock:
            return next(self._it)


def user_seed(seed: int, name: str) -> int:
    return seed * 1_000_003 + zlib.crc32(name.encode())


def drive(chat: Chat, user: User, pool: Locked, guard: QualityGuard, rng: random.Random, *, needed: int,
          concurrency: int) -> list[Truth]:
    """Run sessions, `concurrency` at a time, until about `needed` interactions are done."""
    lock = threading.Lock()
    claimed = 0
    out: list[Truth] = []

    def worker() -> None:
        nonlocal claimed
        while True:
            with lock:
                if claimed >= needed:
                    return
                claimed += 3  # a session averages three judged turns; the real count comes back
                session_rng = random.Random(rng.randrange(2**32))
            truths = session(chat, user, pool, guard, session_rng)
            with lock:
                out.extend(truths)
                claimed += len(truths) - 3

    with ThreadPoolExecutor(max_workers=concurrency) as ex:
        for f in [ex.submit(worker) for _ in range(concurrency)]:
            f.result()
    return out


def heldout(user: User, plan: Plan) -> tuple[Prompt, ...]:
    return user.heldout[: plan.heldout_per_user] if plan.heldout_per_user else user.heldout


def pools_for(plan: Plan, trained_on: str | None) -> list[str]:
    """Held-out pools a run needs: its own, and that of the user it is the control for."""
    if trained_on is None:
        return list(plan.eval_users)
    wanted = {trained_on} | {u for u in plan.users if control_for(plan.users, u) == trained_on}
    return [u for u in plan.eval_users if u in wanted]


def quiet_engine(db_path: Path, plan: Plan, truths: list[Truth]) -> dict[str, Any]:
    """Wait until the judge has scored the turns so far, so its votes, which the same engine serves,
    do not share a batch with held-out replies: how many turns were still unjudged at the timeout
    (`judge_pending`) and how long the wait took (`judge_wait_s`), for the point's record."""
    started = time.monotonic()
    pending = wait_for_judging(db_path, truths, timeout_s=plan.version_wait_s)
    return {"judge_pending": pending, "judge_wait_s": round(time.monotonic() - started, 1)}


def eval_point(chat: Chat, plan: Plan, guard: QualityGuard, *, x: int, version: int | None,
               model: str, pools: list[str], quiet: dict[str, Any] | None = None) -> dict[str, Any]:
    users = all_users()
    started = time.monotonic()
    evals = {name: evaluate(chat, users[name], heldout(users[name], plan), guard, model=model)
             for name in pools}
    point = {"interactions": x, "version": version, "model": model, "evals": evals,
             "eval_s": round(time.monotonic() - started, 1),
             **(quiet or {"judge_pending": None, "judge_wait_s": None})}
    print(f"   x={x:>3} v={version} " + " ".join(f"{n}={e['satisfaction']:.2f}" for n, e in evals.items()),
          flush=True)
    return point


def hinted_compliance(chat: Chat, plan: Plan, guard: QualityGuard) -> dict[str, Any]:
    """The base model with each user's hint in its prompt: the ceiling hint distillation can pass on."""
    users = all_users()
    return {name: evaluate(chat, users[name], heldout(users[name], plan), guard, model=chat.model,
                           hinted=True)
            for name in plan.eval_users}


def run_one(settings: Settings, plan: Plan, guard: QualityGuard, shared: dict[str, Any], *, method: str,
            user_name: str | None, seed: int, workdir: Path) -> dict[str, Any]:
    """One server, one method, trained on one user (None: the off run, which trains on nothing)."""
    tag = f"{method}-{user_name or 'all'}-s{seed}"
    data_dir = workdir / tag
    started = time.monotonic()
    record: dict[str, Any] = {"method": method, "trained_on": user_name, "seed": seed, "points": [],
                              "error": None}
    truths: list[Truth] = []
    child = child_settings(settings, data_dir, method=method, judge_seed=user_seed(seed, user_name or "off"),
                           lockstep=plan.lockstep)
    if plan.train_config:  # the learner reads DATA_DIR/train_config.json; nothing is set behind its back
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "train_config.json").write_text(json.dumps(plan.train_config))
    print(f"== {tag}", flush=True)
    try:
        with Server(child, data_dir.with_suffix(".log")) as server:
            client = OpenAI(base_url=f"{server.base_url}/v1", api_key="bench", max_retries=2, timeout=300.0)
            chat = Chat(client, child.served_model_name, plan.max_tokens, plan.temperature)
            if "baseline" not in shared:
                shared["baseline"] = eval_point(chat, plan, guard, x=0, version=None, model=chat.model,
                                                pools=list(plan.eval_users))
                shared["hinted"] = hinted_compliance(chat, plan, guard)
            record["points"].append(shared["baseline"])
            truths = _train_loop(chat, plan, guard, server, record, method=method, user_name=user_name,
                                 seed=seed)
            db_path = server.db_path
            quiet = quiet_engine(db_path, plan, truths)
            if method != "off":  # the last full batches finish training after the last session
                if plan.lockstep:
                    train_ready(server.settings, timeout_s=LOCKSTEP_TRAIN_S)
                else:
                    wait_for_training(db_path, timeout_s=plan.version_wait_s)
                _served_last(chat, plan, guard, server, record, db_path, x=len(truths),
                             pools=pools_for(plan, user_name), quiet=quiet)
    except Exception as exc:  # one failed run must not lose the others; the error goes in the results
        record["error"] = f"{type(exc).__name__}: {exc}"
        print(f"   failed: {record['error']}", flush=True)
    record["interactions"] = len(truths)
    record["judge"] = judge_agreement(data_dir / "learnproxy.db", truths)
    record["elapsed_s"] = round(time.monotonic() - started, 1)
    return record


def _train_loop(chat: Chat, plan: Plan, guard: QualityGuard, server: Server, record: dict[str, Any], *,
                method: str, user_name: str | None, seed: int) -> list[Truth]:
    users = all_users()
    names = [user_name] if user_name else list(plan.users)
    truths: list[Truth] = []
    version = 0
    for name in names:
        rng = random.Random(user_seed(seed, name))
        pool = Locked(cycle(users[name].train, rng))
        target = plan.interactions if user_name else plan.off_interactions
        done = 0
        while done < target:
            block = drive(chat, users[name], pool, guard, rng, needed=min(plan.eval_every, target - done),
                          concurrency=plan.concurrency)
            truths += block
            done += len(block)
            if method == "off":
                continue
            if plan.lockstep:  # every turn of the block judged, then every full batch trained, before more
                wait_for_judging(server.db_path, truths, timeout_s=LOCKSTEP_TRAIN_S)
                if not train_ready(server.settings, timeout_s=LOCKSTEP_TRAIN_S):
                    continue  # no full batch yet: the next block talks to the same version
            found = next_version(server, version, plan.version_wait_s)
            if found is None:
                continue
            version, model = found
            if model is None:
                print(f"   x={len(truths):>3} v={version} rejected by the publish check", flush=True)
            else:
                quiet = quiet_engine(server.db_path, plan, truths)
                record["points"].append(eval_point(chat, plan, guard, x=len(truths), version=version,
                                                   model=model, pools=pools_for(plan, user_name), quiet=quiet))
    if method == "off":  # greedy replies of an untouched model: this point measures the eval's noise
        quiet = quiet_engine(server.db_path, plan, truths)
        record["points"].append(eval_point(chat, plan, guard, x=len(truths), version=None, model=chat.model,
                                           pools=list(plan.eval_users), quiet=quiet))
    record["truths"] = [asdict(t) for t in truths]
    return truths


def next_version(server: Server, newer_than: int, timeout_s: float) -> tuple[int, str | None] | None:
    """The newest version above `newer_than` that is served, with its model name, else the newest one the
    publish check rejected (name None); waits up to `timeout_s`, None if neither came."""
    db_path = server.db_path
    deadline = time.monotonic() + timeout_s
    while True:
        served = server.wait_for_version(newer_than, 0.0)
        if served is not None:
            return served
        rejected = [r["version"] for r in rejected_versions(db_path) if r["version"] > newer_than]
        if rejected:
            return max(rejected), None
        if time.monotonic() >= deadline:
            return None
        time.sleep(2.0)


def _served_last(chat: Chat, plan: Plan, guard: QualityGuard, server: Server, record: dict[str, Any],
                 db_path: Path, *, x: int, pools: list[str], quiet: dict[str, Any]) -> None:
    """Make the run's last point the version served at the end, if not evaluated last: usually the
    newest, trained after the last session; after a rollback (learner/regression.py) an earlier one."""
    served, record["rolled_back"] = served_and_rolled_back(db_path)
    record["rejected"] = rejected_versions(db_path)
    if not record["points"] or record["points"][-1]["version"] == served:
        return
    model = server.version_models().get(served) if served is not None else server.settings.model
    if model is not None:  # a served version is always loaded; None only if the server went away
        record["points"].append(eval_point(chat, plan, guard, x=x, version=served, model=model, pools=pools,
                                           quiet=quiet))


def runs_for(plan: Plan) -> list[tuple[str, str | None, int]]:
    out: list[tuple[str, str | None, int]] = []
    if "off" in plan.methods:
        out.append(("off", None, plan.seeds[0]))  # greedy evaluation of the base is seed-independent
    for seed in plan.seeds:
        for method in plan.methods:
            if method != "off":
                out += [(method, user, seed) for user in plan.users]
    return out


def execute(settings: Settings, plan: Plan, *, command: str, mode: str, out_dir: Path, variant: str = "",
            keep: Path | None = None) -> dict[str, Any]:
    """Run every (method, user, seed) of the plan and write the raw results, plots and markdown.

    Each run's data folder (its DB, adapters, logs) goes in a temporary folder removed at the end,
    or under `keep`, left in place for inspection (scripts/rollout_probe.py reads a run's DB)."""
    started = time.monotonic()
    # This process only drives the server and embeds replies for the guard: one core's worth.
    set_torch_threads(settings.torch_threads or 1)
    guard = QualityGuard()
    assert guard.validation is not None
    results: dict[str, Any] = {
        "command": command, "mode": mode, "variant": variant, "plan": asdict(plan),
        "started_at": datetime.now(UTC).isoformat(), "guard": asdict(guard.validation), "runs": [],
    }
    shared: dict[str, Any] = {}
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    with (nullcontext(str(keep)) if keep is not None else tempfile.TemporaryDirectory(prefix="learnproxy-bench-")
          ) as tmp:
        for method, user_name, seed in runs_for(plan):
            results["runs"].append(run_one(settings, plan, guard, shared, method=method, user_name=user_name,
                                           seed=seed, workdir=Path(tmp)))
            # after every run, so an interrupted multi-hour benchmark keeps the runs it finished
            results["baseline"] = shared.get("baseline")
            results["hinted"] = shared.get("hinted")
            results["elapsed_s"] = round(time.monotonic() - started, 1)
            report.write(results, out_dir)
    return results


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="learnproxy bench learn", description=__doc__)
    p.add_argument("--quick", action="store_true", help="one user, combined and off, 32 interactions")
    p.add_argument("--method", choices=[*METHODS, "all"], default="all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=1,
                   help="seeds in one full run, from --seed on (headline figures: 2, or --merge two runs)")
    p.add_argument("--users", help="comma-separated users to train on (default: all; quick: student)")
    p.add_argument("--interactions", type=int, help="training interactions per run")
    p.add_argument("--heldout", type=int, help="held-out prompts per user (0: all)")
    p.add_argument("--temperature", type=float,
                   help=f"sampling temperature of training turns (default {DEFAULT_TEMPERATURE}, SmolLM2's card's)")
    p.add_argument("--version-wait", type=float, help="seconds to wait for a new adapter after each block")
    p.add_argument("--train-config", type=Path, metavar="JSON", default=DEFAULT_TRAIN_CONFIG,
                   help="learner settings (TrainConfig fields) for every trained run, e.g. {\"opd_mode\": \"topk\"} "
                        f"(default: {DEFAULT_TRAIN_CONFIG.relative_to(DOCS.parent)}; {{}} for the learner's defaults)")
    p.add_argument("--tag", default="", help="suffix for the result files, to keep variants apart")
    p.add_argument("--out", type=Path, default=DOCS, help="folder for learn_results/ and img/")
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="keep each run's data folder (DB, adapters, logs) under DIR instead of deleting it")
    p.add_argument("--lockstep", action="store_true",
                   help="one session at a time, seeded sampling and judging, training only between blocks: "
                        "the same command repeats the run (slower; bench/learn/lockstep.py)")
    p.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                   help="run nothing: merge raw results of several seeds and render them")
    return p.parse_args(argv)


def plan_from(args: argparse.Namespace) -> Plan:
    plan = Plan.quick(args.method, args.seed) if args.quick else Plan.full(args.method, args.seed, args.seeds)
    if args.users:
        users = tuple(u.strip() for u in args.users.split(",") if u.strip())
        unknown = set(users) - set(all_users())
        if unknown:
            raise SystemExit(f"unknown users: {', '.join(sorted(unknown))}")
        plan = replace(plan, users=users, eval_users=users)
    if args.interactions:
        every = min(plan.eval_every, args.interactions)
        plan = replace(plan, interactions=args.interactions, eval_every=every,
                       off_interactions=min(plan.off_interactions, args.interactions))
    if args.heldout is not None:
        plan = replace(plan, heldout_per_user=args.heldout)
    if args.version_wait is not None:
        plan = replace(plan, version_wait_s=args.version_wait)
    if args.lockstep:
        plan = replace(plan, lockstep=True, concurrency=1)
    if args.temperature is not None:
        plan = replace(plan, temperature=args.temperature)
    if args.train_config:
        from learner.config import TrainConfig

        overrides = json.loads(args.train_config.read_text())
        TrainConfig.from_json(overrides)  # fail now on a typo, not in every server's worker
        owned = sorted({"method", "batch_size"} & set(overrides))
        if owned:  # the learner takes these from the server's settings, over the file
            raise SystemExit(f"--train-config cannot set {', '.join(owned)}: use --method, or "
                             "LEARNPROXY_TRAIN_BATCH_SIZE for the batch size")
        plan = replace(plan, train_config=overrides or None)
    return plan


def main(argv: list[str], settings: Settings) -> int:
    """Entry point for `learnproxy bench learn [--quick] [--method ...] [--seed N]`."""
    args = parse(argv)
    command = ("learnproxy bench learn " + " ".join(argv)).strip()
    if not re.fullmatch(r"[A-Za-z0-9-]*", args.tag):
        raise SystemExit(f"--tag {args.tag!r}: use letters, digits and '-'")
    if args.merge:
        try:
            results = report.merge([json.loads(path.read_text()) for path in args.merge])
        except ValueError as exc:
            raise SystemExit(str(exc)) from exc
        results = {**results, "variant": args.tag or results.get("variant")}
        report.write(results, args.out)
    else:
        results = execute(settings, plan_from(args), command=command, mode="quick" if args.quick else "full",
                          out_dir=args.out, variant=args.tag, keep=args.keep)
    body = report.render(results)
    print(body, flush=True)
    if args.out.resolve() == DOCS.resolve():  # figures in docs/ get their section in BENCHMARKS.md
        from cli.bench import write_section

        write_section(report.tag(results).replace("_", "-"), body, command)
    return 1 if any(r["error"] for r in results["runs"]) else 0


def run(settings: Settings, *, quick: bool) -> str:
    """The `make bench` hook: the quick (or full) learning benchmark as a markdown section."""
    argv = ["--quick"] if quick else []
    args = parse(argv)
    results = execute(settings, plan_from(args), command="learnproxy bench learn " + " ".join(argv),
                      mode="quick" if quick else "full", out_dir=args.out)
    return report.render(results)
