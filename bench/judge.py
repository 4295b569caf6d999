"""Judge benchmark: judged turns per minute with m=3 votes, and judge-eval figures per stage.

The judge is the default one: learnproxy's own proxy serving the base model on the embedded engine
(`bench.judge_server`), unless `settings.judge_url` names another endpoint. The
turns are the shipped labelled set, written into a scratch SQLite DB and judged by the real
`judges.pipeline.judge_turn`, once with the LLM votes alone and once with the full cascade.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from core.blobs import insert_blobs, json_row
from core.db import make_engine, make_session_factory
from core.models import Base, ChatSession, Turn, TurnStatus, utcnow
from core.settings import Settings
from judges.client import JudgeClient
from judges.evaluate import STAGE_FLAGS, Case, evaluate_cases, fmt, load_cases
from judges.pipeline import judge_turn, reaction_for

LABELS = Path(__file__).resolve().parent.parent / "tests" / "data" / "judge_labels.jsonl"


def _subset(cases: Sequence[Case], n: int) -> list[Case]:
    """Every k-th case, so a small run still spans tool results, corrections and ambiguous replies."""
    step = max(len(cases) // n, 1)
    return list(cases[::step])[:n]


def _write_turns(factory: sessionmaker[Session], cases: Sequence[Case], tag: str) -> list[int]:
    ids = []
    with factory() as session:
        for i, case in enumerate(cases):
            sid = f"bench-{tag}-{i}"
            session.add(ChatSession(id=sid, source="header"))
            row = json_row({"role": "user", "content": case.inp.request})
            insert_blobs(session, [row])
            turn = Turn(session_id=sid, turn_index=0, status=TurnStatus.ready, request_id=sid, model="bench",
                        message_refs=[row["hash"]], response_text=case.inp.output,
                        next_state=case.inp.next_state, next_state_at=utcnow())
            session.add(turn)
            session.flush()
            ids.append(turn.id)
        session.commit()
    return ids


def _throughput(factory: sessionmaker[Session], client: JudgeClient, settings: Settings,
                cases: Sequence[Case], stage: str) -> tuple[float, float]:
    """(turns per minute, median seconds per turn) judging `cases` with `stage`."""
    staged = settings.model_copy(update=STAGE_FLAGS[stage])
    reaction = reaction_for(staged)
    ids = _write_turns(factory, cases, stage)
    seconds = []
    start = time.perf_counter()
    for turn_id in ids:
        t0 = time.perf_counter()
        judge_turn(factory, client, staged, turn_id, reaction=reaction)
        seconds.append(time.perf_counter() - t0)
    total = time.perf_counter() - start
    return 60.0 * len(ids) / total, statistics.median(seconds)


def run(settings: Settings, *, quick: bool) -> str:
    cases = load_cases(LABELS)
    n_speed, n_llm = (2, 3) if quick else (12, len(cases))
    with ExitStack() as stack:
        url = settings.judge_url
        if url is None:
            from bench.judge_server import LocalJudgeServer

            url = stack.enter_context(LocalJudgeServer(settings)).url
        judge = settings.model_copy(update={"judge_url": url, "judge_votes": 3,
                                            "judge_max_tokens": 64 if quick else settings.judge_max_tokens})
        client = JudgeClient.from_settings(judge)
        stack.callback(client.close)
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        engine = make_engine(f"sqlite:///{tmp / 'bench.db'}")
        stack.callback(engine.dispose)
        Base.metadata.create_all(engine)
        factory = make_session_factory(engine)
        speed_cases = _subset(cases, n_speed)
        speed = {stage: _throughput(factory, client, judge, speed_cases, stage) for stage in ("votes", "cascade")}
        reports = {}
        for stage in ("signal", "reaction", "votes", "cascade"):
            subset = cases if stage in ("signal", "reaction") else _subset(cases, n_llm)
            reports[stage] = evaluate_cases(subset, stage, judge, client)  # type: ignore[arg-type]
    return _markdown(judge, speed, reports, n_speed)


def _markdown(settings: Settings, speed: dict[str, tuple[float, float]], reports: dict, n_speed: int) -> str:
    lines = [
        "### Judge: throughput and reliability",
        "",
        f"Judge model `{settings.judge_model_name}`, m={settings.judge_votes} votes at temperature "
        f"{settings.judge_temperature}, max {settings.judge_max_tokens} tokens per vote; {n_speed} turns timed "
        "per row, side by side in one run.",
        "",
        "| stages | judged turns / min | median s / turn |",
        "|---|---|---|",
    ]
    for stage, (per_min, median_s) in speed.items():
        lines.append(f"| {stage} | {per_min:.2f} | {median_s:.2f} |")
    lines += ["", "| stage | n | accuracy | leniency | strictness | precision of -1 | kappa | unparsed | "
              "always +1 accuracy |", "|---|---|---|---|---|---|---|---|---|"]
    for stage, report in reports.items():
        m = report.metrics()
        lines.append(f"| {stage} | {m['n']} | {fmt(m['accuracy'])} | {fmt(m['leniency'])} | "
                     f"{fmt(m['strictness'])} | {fmt(m['precision_neg'])} | {fmt(m['kappa'])} | "
                     f"{fmt(m['unparsed_rate'])} | {fmt(m['baseline_accuracy'])} |")
    lines += ["", "Limits: throughput is bound by decoding the votes one request at a time on this machine; "
              "the votes and cascade figures cover a subset of the labelled set in quick mode, and a "
              "single stage scores 0 wherever it does not decide."]
    return "\n".join(lines) + "\n"
