"""End to end with real Celery workers (`python -m cli.worker`, a prefork subprocess) on the
embedded SQLite broker and on Redis, plus the queue housekeeping.

The judge endpoint is the scripted OpenAI-compatible stand-in of `conftest.py` (a remote judge at
the network edge), served over real HTTP. Turns are written straight into the DB, as the proxy
would write them, since judges may not import the proxy.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from kombu import Connection
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from core.celery_app import JUDGE_TASK, create_celery
from core.models import Turn, TurnStatus, Vote, utcnow
from core.settings import Settings
from judges.maintenance import purge_delivered, requeue_ready
from tests.judges.conftest import ScriptedJudge, add_turn, tool_call
from tests.utils.broker import queued_tasks

REPO = Path(__file__).resolve().parents[2]
# Real Celery workers with fixed names on fixed queues, two of them on one Redis DB that they purge: under
# pytest-xdist (`--dist loadgroup`) these tests run one after another in one process.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("celery_workers")]

USER_REPLY = [{"role": "tool", "tool_call_id": "call_1", "content": "port: 8080"},
              {"role": "user", "content": "and the host?"}]
TOOL_ERROR = [{"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"error": "ENOENT: config.yml"})}]


def worker_env(settings: Settings, judge: ScriptedJudge, auto_train: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEARNPROXY_")}
    env.update({
        "LEARNPROXY_DATA_DIR": str(settings.data_dir),
        "LEARNPROXY_JUDGE_URL": judge.url,
        "LEARNPROXY_JUDGE_REACTION": "false",  # the reaction stage has its own tests; keep workers light
        "LEARNPROXY_AUTO_TRAIN": str(auto_train).lower(),
        "LEARNPROXY_BROKER_POLL_INTERVAL_S": "0.05",
        "PYTHONPATH": str(REPO),
    })
    if settings.broker_url:
        env["LEARNPROXY_BROKER_URL"] = settings.broker_url
    return env


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(settings: Settings, judge: ScriptedJudge, *extra: str, auto_train: bool = False
              ) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"worker-{len(procs)}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.worker", "--queues", "judge", "--concurrency", "1",
             "--hostname", f"test{len(procs)}@localhost", *extra],
            cwd=REPO, env=worker_env(settings, judge, auto_train), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the pool child dies with it
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def status_of(factory: sessionmaker[Session], turn_id: int) -> str:
    with factory() as s:
        turn = s.get(Turn, turn_id)
        assert turn is not None
        return turn.status


def count_votes(factory: sessionmaker[Session], turn_id: int, kind: str) -> int:
    with factory() as s:
        return len(list(s.scalars(select(Vote.id).where(Vote.turn_id == turn_id, Vote.kind == kind))))


def judged(factory: sessionmaker[Session], turn_id: int) -> Callable[[], bool]:
    return lambda: status_of(factory, turn_id) in (TurnStatus.judged, TurnStatus.hinted)


def run_two_turns(settings: Settings, db: Session, factory: sessionmaker[Session], judge: ScriptedJudge,
                  start: Callable[..., subprocess.Popen[bytes]], *, auto_train: bool = False) -> None:
    """A two-turn session gets votes for turn 1; a tool error is signalled and hinted."""
    first = add_turn(db, next_state=USER_REPLY, tool_calls=tool_call("read", '{"path": "config.yml"}'))
    add_turn(db, next_state=None, status=TurnStatus.awaiting_next_state)  # the session's last turn
    failed = add_turn(db, next_state=TOOL_ERROR, session_id="s2", tool_calls=tool_call("read", "{}"))
    app = create_celery(settings)
    start(settings, judge, auto_train=auto_train)
    for turn_id in (first, failed):
        app.send_task(JUDGE_TASK, args=[turn_id])
    wait_for(judged(factory, first), 120, "turn 1 judged")
    wait_for(judged(factory, failed), 60, "the tool-error turn judged")
    assert count_votes(factory, first, "prm") == settings.judge_votes
    with factory() as s:
        bad = s.get(Turn, failed)
        assert bad is not None and (bad.score, bad.score_source, bad.status) == (-1, "signal", TurnStatus.hinted)
    assert count_votes(factory, failed, "prm") == 0 and count_votes(factory, failed, "hint") == settings.judge_votes
    assert judge.kinds().count("hint") == settings.judge_votes


def test_worker_on_the_sqlite_broker(
    settings: Settings, db: Session, session_factory: sessionmaker[Session], judge_server: ScriptedJudge,
    start_worker: Callable[..., subprocess.Popen[bytes]],
) -> None:
    run_two_turns(settings, db, session_factory, judge_server, start_worker, auto_train=True)
    # each judged turn asked for a train step by name, on the train queue (no worker consumes it here)
    assert queued_tasks(settings, "train") == ["learner.tasks.train_step"] * 2


def test_worker_on_redis(
    settings: Settings, db: Session, session_factory: sessionmaker[Session], judge_server: ScriptedJudge,
    start_worker: Callable[..., subprocess.Popen[bytes]], redis_url: str,
) -> None:
    # a Redis DB of its own, so other suites sharing the server never consume these tasks
    redis_settings = settings.model_copy(update={"broker_url": redis_url.rsplit("/", 1)[0] + "/13"})
    broker = redis.Redis.from_url(redis_settings.broker, socket_timeout=10)
    broker.flushdb()
    run_two_turns(redis_settings, db, session_factory, judge_server, start_worker)
    # the tasks travelled through Redis: kombu bound the judge queue there, and no SQLite broker exists
    assert broker.exists("_kombu.binding.judge")
    assert not (settings.data_dir / "broker.db").exists()
    broker.close()


def test_killed_worker_loses_nothing_and_the_turn_is_judged_once(
    settings: Settings, db: Session, session_factory: sessionmaker[Session], judge_server: ScriptedJudge,
    start_worker: Callable[..., subprocess.Popen[bytes]],
) -> None:
    judge_server.delay_s = 60.0  # the judge hangs: the task is mid-flight when the worker dies
    turn_id = add_turn(db, next_state=USER_REPLY)
    create_celery(settings).send_task(JUDGE_TASK, args=[turn_id])
    first = start_worker(settings, judge_server)
    wait_for(lambda: len(judge_server.requests) >= 1, 120, "the judge call in flight")
    assert status_of(session_factory, turn_id) == TurnStatus.judging
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)

    judge_server.delay_s = 0.0
    judge_server.requests.clear()
    start_worker(settings, judge_server, "--recover-after", "1", "--maintenance-interval", "1")
    wait_for(judged(session_factory, turn_id), 120, "the turn judged after the restart")
    time.sleep(3)  # further maintenance rounds must not judge it again
    assert count_votes(session_factory, turn_id, "prm") == settings.judge_votes
    assert judge_server.kinds().count("prm") == settings.judge_votes


def test_requeue_sends_ready_and_stale_turns_only(
    settings: Settings, db: Session, session_factory: sessionmaker[Session]
) -> None:
    old = utcnow() - timedelta(hours=1)
    waiting = add_turn(db, next_state=USER_REPLY)
    fresh = add_turn(db, next_state=USER_REPLY)
    stale = add_turn(db, next_state=USER_REPLY, status=TurnStatus.judging)
    busy = add_turn(db, next_state=USER_REPLY, status=TurnStatus.judging)
    add_turn(db, next_state=USER_REPLY, status=TurnStatus.judged)
    add_turn(db, next_state=USER_REPLY, turn_type="side")
    for turn_id, next_at, claimed in ((waiting, old, None), (fresh, utcnow(), None), (stale, old, old),
                                      (busy, old, utcnow())):
        turn = db.get(Turn, turn_id)
        assert turn is not None
        turn.next_state_at, turn.judged_at = next_at, claimed
    db.commit()
    app = create_celery(settings)
    assert requeue_ready(session_factory, app, ready_after_s=60, stale_after_s=600) == 2
    engine = create_engine(settings.broker.removeprefix("sqla+"))
    with engine.connect() as conn:
        payloads = [row[0] for row in conn.execute(text("SELECT payload FROM kombu_message WHERE visible = 1"))]
    engine.dispose()
    sent = sorted(json.loads(json.loads(p)["headers"]["argsrepr"])[0] for p in payloads)
    assert sent == sorted([waiting, stale])

    # a consumer fetches both; the transport keeps them as visible=0 rows until purged
    with Connection(settings.broker) as conn:
        queue = conn.SimpleQueue("judge")
        for _ in range(2):
            queue.get(timeout=5).ack()
        queue.close()
    assert hidden_rows(settings) == 2
    assert purge_delivered(settings.broker) == 2
    assert hidden_rows(settings) == 0
    assert purge_delivered("redis://127.0.0.1:6379/13") == 0  # nothing to clean on other brokers


def hidden_rows(settings: Settings) -> int:
    engine = create_engine(settings.broker.removeprefix("sqla+"))
    with engine.connect() as conn:
        count = conn.execute(text("SELECT count(*) FROM kombu_message WHERE visible = 0")).scalar()
    engine.dispose()
    return int(count or 0)


def test_a_lost_pool_child_on_redis_is_redelivered_and_taken_over(
    settings: Settings, db: Session, session_factory: sessionmaker[Session], judge_server: ScriptedJudge,
    start_worker: Callable[..., subprocess.Popen[bytes]], redis_url: str,
) -> None:
    redis_settings = settings.model_copy(update={"broker_url": redis_url.rsplit("/", 1)[0] + "/13"})
    create_celery(redis_settings).control.purge()
    judge_server.delay_s = 60.0
    turn_id = add_turn(db, next_state=USER_REPLY)
    create_celery(redis_settings).send_task(JUDGE_TASK, args=[turn_id])
    worker = start_worker(redis_settings, judge_server)
    # the votes go out concurrently: wait for all of them, or a late one lands after the clear below
    wait_for(lambda: len(judge_server.requests) >= settings.judge_votes, 120, "the judge calls in flight")
    children = Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text().split()
    assert children, "the prefork pool has a child"
    judge_server.delay_s = 0.0
    judge_server.requests.clear()
    for child in children:
        os.kill(int(child), signal.SIGKILL)  # only the pool child dies; the main process lives on
    # acks_late + reject_on_worker_lost: the message comes back flagged redelivered, and the stale
    # claim is taken over at once (recover-after is the default 12 minutes, so it was not the sweep)
    wait_for(judged(session_factory, turn_id), 120, "the turn judged after redelivery")
    assert worker.poll() is None
    assert count_votes(session_factory, turn_id, "prm") == settings.judge_votes
    assert judge_server.kinds().count("prm") == settings.judge_votes
