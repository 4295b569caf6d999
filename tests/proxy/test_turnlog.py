"""The write-behind turn logger on real SQLite files and a real Postgres schema.

Commits are counted with SQLAlchemy's own `commit` engine event, so "batched" is observed on the
connection, not inferred from timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, select
from sqlalchemy.orm import Session, sessionmaker

from core.db import make_engine, make_session_factory
from core.models import Base, Blob, ChatSession, Turn, TurnStatus
from core.turns import load_turn
from proxy.records import Assignment, NextStateRecord, SessionClose, TurnRecord
from proxy.turnlog import LogItem, TurnLogger, pending_ready_ids
from tests.utils.openclaw import OpenClawAgent, system_prompt, tool_call, tools, turn_record


def count_commits(engine: Engine) -> list[int]:
    commits: list[int] = []
    event.listen(engine, "commit", lambda _conn: commits.append(1))
    return commits


def record(session_id: str, index: int, *, turn_type: str = "main", **kw: Any) -> TurnRecord:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"q{index}"}]
    return turn_record(Assignment(session_id, index, turn_type, "header"), messages, text=f"a{index}", **kw)


def next_state(session_id: str, index: int) -> NextStateRecord:
    return NextStateRecord(session_id, index, [{"role": "user", "content": "ok"}], datetime.now(UTC))


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, settings: Any) -> Iterator[tuple[Engine, sessionmaker[Session]]]:
    """The same logger flows on a SQLite file and on a fresh Postgres schema."""
    url = settings.db_url if request.param == "sqlite" else request.getfixturevalue("pg_url")
    engine = make_engine(url)
    Base.metadata.create_all(engine)
    yield engine, make_session_factory(engine)
    engine.dispose()


def test_burst_lands_in_batched_commits(store: tuple[Engine, sessionmaker[Session]]) -> None:
    engine, factory = store
    commits = count_commits(engine)
    logger = TurnLogger(factory, flush_interval_s=0.2, batch_size=64, on_ready=lambda ids: None)
    logger.start()
    for i in range(200):
        logger.submit(record(f"s{i % 10}", i // 10))
    logger.stop()
    with factory() as db:
        assert db.scalar(select(func.count()).select_from(Turn)) == 200
        assert db.scalar(select(func.count()).select_from(ChatSession)) == 10
        assert all(s.n_turns == 20 for s in db.scalars(select(ChatSession)))
    # 200 items in batches of at most 64: four commits when the burst outruns the writer
    assert 4 <= len(commits) <= 12, len(commits)
    assert (logger.stats.items, logger.stats.batches, logger.stats.failed_items) == (200, len(commits), 0)


def test_stop_flushes_everything_without_waiting_for_the_interval(
    store: tuple[Engine, sessionmaker[Session]],
) -> None:
    _, factory = store
    logger = TurnLogger(factory, flush_interval_s=30.0, batch_size=1000, on_ready=lambda ids: None)
    logger.start()
    for i in range(50):
        logger.submit(record("s", i))
    started = time.monotonic()
    logger.stop()
    assert time.monotonic() - started < 5.0
    logger.submit(record("s", 50))  # after stop: written synchronously, not dropped
    with factory() as db:
        assert db.scalar(select(func.count()).select_from(Turn)) == 51


def test_on_ready_fires_after_commit_with_the_ready_ids(store: tuple[Engine, sessionmaker[Session]]) -> None:
    _, factory = store
    calls: list[tuple[list[int], list[str]]] = []

    def on_ready(ids: list[int]) -> None:  # reads through another session: the rows must be committed
        with factory() as db:
            statuses = [db.get(Turn, i).status for i in ids]  # type: ignore[union-attr]
        calls.append((ids, statuses))

    logger = TurnLogger(factory, flush_interval_s=0.05, batch_size=64, on_ready=on_ready)
    logger.start()
    for item in (
        record("s", 0),
        record("s", 1, turn_type="side"),
        record("s", 2),
        next_state("s", 0),
        next_state("s", 1),
        record("s", 3, error="EngineError: x"),
        next_state("s", 3),
    ):
        logger.submit(item)
    logger.stop()
    with factory() as db:
        by_index = {t.turn_index: t for t in db.scalars(select(Turn))}
    assert [s.status for _, s in sorted(by_index.items())] == [
        "ready",
        "skipped",
        "awaiting_next_state",
        "failed",
    ]
    assert [ids for ids, _ in calls] == [[by_index[0].id]]  # side and failed turns never become ready
    assert calls[0][1] == [TurnStatus.ready]
    assert by_index[0].next_state == [{"role": "user", "content": "ok"}]


def test_hook_failure_leaves_turns_ready_for_a_sweep(store: tuple[Engine, sessionmaker[Session]]) -> None:
    _, factory = store

    def broken(ids: list[int]) -> None:
        raise ConnectionError("broker down")

    logger = TurnLogger(factory, flush_interval_s=0.01, batch_size=8, on_ready=broken)
    logger.start()
    for i in range(3):
        logger.submit(record("s", i))
        logger.submit(next_state("s", i))
    logger.stop()
    assert logger.stats.hook_errors >= 1
    with factory() as db:
        expected = sorted(db.scalars(select(Turn.id)))
    assert pending_ready_ids(factory) == expected and len(expected) == 3


def test_a_bad_record_does_not_lose_its_batch(store: tuple[Engine, sessionmaker[Session]]) -> None:
    _, factory = store
    logger = TurnLogger(factory, flush_interval_s=0.5, batch_size=64, on_ready=lambda ids: None)
    logger.start()
    items: list[LogItem] = [
        record("s", 0),
        record("s", 1),
        record("s", 1),
        record("s", 2),
        next_state("s", 2),
    ]  # dup index
    for item in items:
        logger.submit(item)
    logger.stop()
    assert (logger.stats.retried_batches, logger.stats.failed_items) == (1, 1)
    with factory() as db:
        turns = list(db.scalars(select(Turn).order_by(Turn.turn_index)))
    assert [t.turn_index for t in turns] == [0, 1, 2]
    assert turns[2].status == TurnStatus.ready


def test_repeated_content_is_stored_once_and_reads_back(store: tuple[Engine, sessionmaker[Session]]) -> None:
    _, factory = store
    agent = OpenClawAgent("Read it.", system=system_prompt(20_000))
    toolset = tools()
    prefix = list(range(5000, 7000))  # a long shared token prefix (system prompt and tools)
    logger = TurnLogger(factory, flush_interval_s=0.01, batch_size=64, on_ready=lambda ids: None)
    logger.start()
    for i in range(3):
        messages = agent.request()
        calls = [tool_call("read", {"path": f"f{i}"}, f"call_{i}")]
        logger.submit(
            turn_record(
                Assignment("s", i, "main", "new"),
                messages,
                calls=calls,
                tools=toolset,
                prompt_token_ids=prefix + [i] * 300,
            )
        )
        agent.receive("", calls)
        agent.tool_results([f"content {i}"])
    logger.submit(SessionClose("s", "idle", datetime.now(UTC)))
    logger.stop()
    with factory() as db:
        n_json = db.scalar(select(func.count()).select_from(Blob).where(Blob.kind == "json"))
        n_ids = db.scalar(select(func.count()).select_from(Blob).where(Blob.kind == "ids"))
        # system, task, tools once; a context block per turn; an assistant and a tool message per later turn
        assert n_json == 3 + 3 + 2 * 2
        # 2000 shared ids = 7 full chunks + a tail that differs per turn, then each turn's own chunks
        assert n_ids is not None and n_ids < 3 * 10
        last = db.scalar(select(Turn).where(Turn.turn_index == 2))
        assert last is not None and last.status == TurnStatus.skipped  # closed while awaiting
        view = load_turn(db, last.id)
        assert view is not None
        assert view.messages == messages and view.tools == toolset
        assert view.prompt_token_ids == prefix + [2] * 300
        assert view.response_logprobs == [-0.5] * len(view.response_token_ids)
        assert db.get(ChatSession, "s").closed_reason == "idle"  # type: ignore[union-attr]


def test_submit_from_many_threads_keeps_every_turn(store: tuple[Engine, sessionmaker[Session]]) -> None:
    _, factory = store
    logger = TurnLogger(factory, flush_interval_s=0.02, batch_size=16, on_ready=lambda ids: None, max_queue=8)
    logger.start()

    def client(n: int) -> None:
        for i in range(25):
            logger.submit(record(f"c{n}", i))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    logger.stop()
    with factory() as db:
        assert db.scalar(select(func.count()).select_from(Turn)) == 100
