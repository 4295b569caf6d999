"""`--lockstep`: a run that the same command repeats, turn for turn.

A plain run talks in four sessions at once while the worker judges and trains beside it, so which
turns make a batch, and which version serves the next turn, depend on timing as well as on `--seed`
(reruns of one seed have ended up to 0.50 apart). In lockstep the simulator talks in one session at
a time, every request carries a seed drawn from its session, the judge's votes are seeded
(`judge_seed`), the engine decodes one sequence at a time (`max_batch_size` 1), and the server does
not train by itself (`auto_train` off). After each block of interactions the benchmark waits until
every turn of the block is judged, then sends the worker one train task per full batch, each waited
for, before the next block starts. The worker trains as it always does (its cached learner keeps
the optimiser's moments across batches).

Why one sequence at a time: in two lockstep runs of one command with the engine's batching left on,
the first two adapter versions came out byte for byte the same, and then a reply served by the same
version, with the same seed, parted from its twin at its 18th token, while the judge's votes decoded
beside it. A batch's float sums differ from a lone sequence's in the last bits, and that is enough to
flip a sampled token where the draw falls close to a boundary. It costs speed: the judge's votes and
the held-out replies no longer share a forward pass.
"""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.learn.judging import read_only
from core.celery_app import TRAIN_QUEUE, TRAIN_TASK, create_celery
from core.models import AdapterState, AdapterVersion
from core.settings import Settings
from learner.config import TrainConfig
from learner.samples import collect_samples

POLL_S = 1.0


def batch_ready(settings: Settings) -> bool:
    """Whether the learner would train a full batch now: its own sample collection, on the DB opened
    read-only and never committed (a turn it would mark stale stays as it is)."""
    config = TrainConfig.from_settings(settings)
    engine = read_only(settings.data_dir / "learnproxy.db")
    try:
        with Session(engine, autoflush=False) as session:
            return len(collect_samples(session, settings, config).samples) >= config.batch_size
    finally:
        engine.dispose()


def newest_version(db_path: Path) -> tuple[int, AdapterState] | None:
    """The newest adapter version's id and state (None before the first)."""
    engine = read_only(db_path)
    try:
        with Session(engine) as session:
            row = session.execute(select(AdapterVersion.id, AdapterVersion.state)
                                  .order_by(AdapterVersion.id.desc()).limit(1)).first()
    finally:
        engine.dispose()
    return (row.id, row.state) if row else None


def train_ready(settings: Settings, *, timeout_s: float) -> list[int]:
    """Train every full batch of judged turns, one train task at a time, each waited for until its
    version has left `training` (up to `timeout_s` each); the versions made, in order. Raises
    TimeoutError when a task does not finish in time: the run would no longer be in lockstep."""
    app = create_celery(settings)
    db_path = settings.data_dir / "learnproxy.db"
    made: list[int] = []
    try:
        while batch_ready(settings):
            before = newest_version(db_path)
            app.send_task(TRAIN_TASK, kwargs={"reason": "bench lockstep"}, queue=TRAIN_QUEUE)
            deadline = time.monotonic() + timeout_s
            while True:
                now = newest_version(db_path)
                if now is not None and (before is None or now[0] > before[0]) and now[1] != AdapterState.training:
                    if now[1] == AdapterState.failed:  # its turns stay ready: sending again would fail again
                        raise RuntimeError(f"lockstep training failed: version {now[0]}")
                    made.append(now[0])
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no version trained within {timeout_s:.0f} s of a lockstep train task")
                time.sleep(POLL_S)
    finally:
        app.close()
    return made
