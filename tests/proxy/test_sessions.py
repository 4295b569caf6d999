"""Session identity without client changes, next-state attachment, done/idle close and restart.

The client side follows what `openclaw@2026.9.6` was measured to send (REFERENCE.md, issue 2):
a rebuilt trailing context block, `content: null` tool-call replies, rewritten call ids and tool
messages without `name`. Everything below the tracker is real: the turn logger and a SQLite file.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from core.models import ChatSession, Turn, TurnStatus
from core.turns import load_turn
from proxy.records import Assignment, SessionHints
from proxy.sessions import SessionTracker, anchor_of, message_key, next_state_of
from proxy.turnlog import TurnLogger
from tests.utils.openclaw import CONTEXT_MARK, OpenClawAgent, tool_call, turn_record

MAIN = SessionHints()


class Harness:
    """A tracker over a running logger on the test's SQLite file."""

    def __init__(self, factory: sessionmaker[Session]) -> None:
        self.factory = factory
        self.ready: list[int] = []
        self.start()

    def start(self) -> None:
        self.logger = TurnLogger(
            self.factory, flush_interval_s=0.01, batch_size=64, on_ready=self.ready.extend
        )
        self.logger.start()
        self.tracker = SessionTracker(self.factory, self.logger, idle_timeout_s=60)

    def restart(self) -> None:
        self.logger.stop()
        self.start()
        self.tracker.load_open_sessions()

    def turn(
        self,
        messages: list[dict[str, Any]],
        hints: SessionHints = MAIN,
        *,
        text: str = "",
        calls: list[dict[str, Any]] | None = None,
        error: str | None = None,
    ) -> Assignment:
        assignment = self.tracker.assign(hints, messages)
        self.tracker.complete(turn_record(assignment, messages, text=text, calls=calls, error=error))
        return assignment

    def flushed(self) -> Session:
        self.logger.stop()
        self.logger.start()
        return self.factory()

    def agent_turn(self, agent: OpenClawAgent, **reply: Any) -> Assignment:
        assignment = self.turn(agent.request(), **reply)
        agent.receive(reply.get("text", ""), reply.get("calls"))
        return assignment


@pytest.fixture
def harness(session_factory: sessionmaker[Session]) -> Iterator[Harness]:
    h = Harness(session_factory)
    yield h
    h.logger.stop()


def turns_of(db: Session, session_id: str) -> list[Turn]:
    return list(db.scalars(select(Turn).where(Turn.session_id == session_id).order_by(Turn.turn_index)))


def test_normalization_ignores_representation_not_meaning() -> None:
    as_list = {
        "role": "user",
        "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}],
    }
    assert message_key(as_list) == message_key({"role": "user", "content": "hi there"})
    null = {
        "role": "assistant",
        "content": None,
        "tool_calls": [tool_call("read", {"a": 1, "b": 2}, "call_1")],
    }
    spaced = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call1", "type": "function", "function": {"name": "read", "arguments": '{"b":2, "a":1}'}}
        ],
    }
    assert message_key(null) == message_key(spaced)
    other_args = {"role": "assistant", "content": None, "tool_calls": [tool_call("read", {"a": 2}, "call_1")]}
    assert message_key(null) != message_key(other_args)


def test_openclaw_tool_round_trip_is_one_inferred_session(harness: Harness) -> None:
    agent = OpenClawAgent("List the files, then read the README.")
    calls = [
        tool_call("exec", {"command": "ls"}, "call_a1"),
        tool_call("read", {"path": "README.md"}, "call_b2"),
    ]
    first = harness.agent_turn(agent, calls=calls)
    # parallel results come back out of order, with rewritten ids and no name
    agent.tool_results(["README.md\nsrc", "# Project"], order=[1, 0])
    second = harness.agent_turn(agent, text="The project has a README and a src folder.")
    agent.user("Thanks, but you forgot the tests folder.")
    third = harness.agent_turn(agent, text="Sorry, there is no tests folder.")

    assert first.source == "new"
    assert (second.source, second.session_id, second.turn_index) == ("inferred", first.session_id, 1)
    assert (third.source, third.session_id, third.turn_index) == ("inferred", first.session_id, 2)
    with harness.flushed() as db:
        t0, t1, t2 = turns_of(db, first.session_id)
        assert t0.next_state == [
            {"role": "tool", "tool_call_id": "call_a1", "name": "exec", "content": "README.md\nsrc"},
            {"role": "tool", "tool_call_id": "call_b2", "name": "read", "content": "# Project"},
        ]
        assert t1.next_state == [{"role": "user", "content": "Thanks, but you forgot the tests folder."}]
        assert [t.status for t in (t0, t1, t2)] == [TurnStatus.ready, TurnStatus.ready, "awaiting_next_state"]
        assert sorted(harness.ready) == [t0.id, t1.id]
        assert db.get(ChatSession, first.session_id).n_turns == 3  # type: ignore[union-attr]
        # the logged request is exactly what was sent, context block included
        logged = load_turn(db, t2.id)
        assert logged is not None and CONTEXT_MARK in str(logged.messages[-1]["content"])


def test_context_block_is_never_next_state() -> None:
    agent = OpenClawAgent("hi")
    after = [agent.request()[-1], {"role": "user", "content": "ok"}, agent.request()[-1]]
    anchor = anchor_of(agent.request(), {"role": "assistant", "content": "Hello"}, 0)
    assert next_state_of(after, anchor) == [{"role": "user", "content": "ok"}]
    assert anchor.history_len == 2  # system and task: the trailing context block is not history


def test_same_reply_different_history_goes_to_the_right_session(harness: Harness) -> None:
    older, newer = OpenClawAgent("Delete tmp/."), OpenClawAgent("Create notes.md.")
    a = harness.agent_turn(older, text="OK.")
    b = harness.agent_turn(newer, text="OK.")
    newer.user("Thanks.")
    assert harness.agent_turn(newer, text="You are welcome.").session_id == b.session_id
    older.user("Thanks.")
    assert harness.agent_turn(older, text="Done.").session_id == a.session_id != b.session_id


def test_tool_results_match_by_position_when_ids_are_unknown() -> None:
    calls = [tool_call("read", {"path": "a"}, "call_1"), tool_call("read", {"path": "b"}, "call_2")]
    anchor = anchor_of([{"role": "user", "content": "go"}], {"role": "assistant", "tool_calls": calls}, 0)
    after = [
        {"role": "tool", "tool_call_id": "x9", "content": "A"},
        {"role": "tool", "tool_call_id": "call_1", "content": "by id"},  # id wins over position
        {"role": "user", "content": "done?"},
    ]
    assert next_state_of(after, anchor) == [
        {"role": "tool", "tool_call_id": "call_1", "name": "read", "content": "by id"},
        {"role": "tool", "tool_call_id": "call_2", "name": "read", "content": "A"},
        {"role": "user", "content": "done?"},
    ]


def test_interleaved_sessions_stay_apart(harness: Harness) -> None:
    agents = [OpenClawAgent(f"Task number {i}") for i in range(3)]
    twins = [OpenClawAgent("hi"), OpenClawAgent("hi")]  # identical conversations, two sessions
    seen: dict[int, set[str]] = {i: set() for i in range(5)}
    everyone = agents + twins
    for step in range(3):
        for i, agent in enumerate(everyone):
            text = "Hello!" if i >= 3 else f"reply {step} to task {i}"
            seen[i].add(harness.agent_turn(agent, text=text).session_id)
            agent.user(f"next {step}" if i < 3 else "more")
    assert all(len(ids) == 1 for ids in seen.values())
    assert len(set().union(*seen.values())) == 5
    with harness.flushed() as db:
        for ids in seen.values():
            turns = turns_of(db, next(iter(ids)))
            assert [t.turn_index for t in turns] == [0, 1, 2]
            assert [t.status for t in turns] == ["ready", "ready", "awaiting_next_state"]


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        (SessionHints(header_session_id="h1", body_session_id="b1", affinity_id="a1"), ("h1", "header")),
        (SessionHints(body_session_id="b1", affinity_id="a1"), ("b1", "body")),
        (SessionHints(affinity_id="a1"), ("a1", "affinity")),
    ],
)
def test_explicit_ids_take_precedence(
    harness: Harness, hints: SessionHints, expected: tuple[str, str]
) -> None:
    agent = OpenClawAgent("hello")
    harness.agent_turn(agent, text="Hi!")  # an inferable session exists, yet the hint wins
    agent.user("and?")
    got = harness.turn(agent.request(), hints, text="And nothing.")
    assert (got.session_id, got.source) == expected
    again = harness.turn([{"role": "user", "content": "unrelated"}], hints, text="ok")
    assert (again.session_id, again.turn_index) == (expected[0], 1)


def test_named_session_with_edited_reply_still_gets_next_state(harness: Harness) -> None:
    hints = SessionHints(header_session_id="chat-7")
    harness.turn([{"role": "user", "content": "Name a colour."}], hints, text="<think>hm</think>Blue.")
    edited = [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},  # the client stripped the reasoning
        {"role": "user", "content": "Another one."},
    ]
    harness.turn(edited, hints, text="Red.")
    with harness.flushed() as db:
        assert turns_of(db, "chat-7")[0].next_state == [{"role": "user", "content": "Another one."}]


def test_side_turns_are_logged_but_never_awaited(harness: Harness) -> None:
    agent = OpenClawAgent("Summarize my notes.")
    main = harness.agent_turn(agent, text="Here is the summary.")
    # a side call (e.g. a title) that carries the whole history lands in the same session...
    side = harness.turn(
        agent.request() + [{"role": "user", "content": "Title?"}],
        SessionHints(turn_type="side"),
        text="Notes summary",
    )
    assert (side.session_id, side.turn_index, side.source) == (main.session_id, 1, "inferred")
    # ...and does not consume the main turn: the user's reply is still matched and attached to it
    agent.user("Shorter please.")
    nxt = harness.agent_turn(agent, text="Summary.")
    assert (nxt.session_id, nxt.turn_index) == (main.session_id, 2)
    with harness.flushed() as db:
        t0, t1, _ = turns_of(db, main.session_id)
        assert (t1.turn_type, t1.status, t1.next_state) == ("side", TurnStatus.skipped, None)
        assert (t0.status, t0.next_state) == (
            TurnStatus.ready,
            [{"role": "user", "content": "Shorter please."}],
        )


def test_done_header_closes_and_skips_last_turn(harness: Harness) -> None:
    hints = SessionHints(header_session_id="job-1")
    harness.turn([{"role": "user", "content": "one"}], hints, text="1")
    harness.turn(
        [
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "1"},
            {"role": "user", "content": "two"},
        ],
        SessionHints(header_session_id="job-1", done=True),
        text="2",
    )
    assert harness.tracker.open_sessions() == 0
    with harness.flushed() as db:
        chat = db.get(ChatSession, "job-1")
        assert chat is not None and chat.closed_reason == "done_header" and chat.closed_at is not None
        assert [t.status for t in turns_of(db, "job-1")] == [TurnStatus.ready, TurnStatus.skipped]
    # the same id used again reopens the session and continues its numbering, across a restart too
    assert harness.turn([{"role": "user", "content": "three"}], hints, text="3").turn_index == 2
    harness.turn([{"role": "user", "content": "four"}], SessionHints(header_session_id="job-1", done=True))
    harness.restart()
    assert harness.turn([{"role": "user", "content": "five"}], hints, text="5").turn_index == 4
    with harness.flushed() as db:
        chat = db.get(ChatSession, "job-1")
        assert chat is not None and chat.closed_at is None and chat.n_turns == 5


def test_idle_sessions_close_and_stop_matching(harness: Harness) -> None:
    agent = OpenClawAgent("hello")
    first = harness.agent_turn(agent, text="Hi there.")
    harness.tracker.sweep_idle(datetime.now(UTC) + timedelta(seconds=30))
    assert harness.tracker.open_sessions() == 1  # not idle long enough
    harness.tracker.sweep_idle(datetime.now(UTC) + timedelta(seconds=61))
    assert harness.tracker.open_sessions() == 0
    agent.user("still there?")
    assert harness.agent_turn(agent, text="Yes.").source == "new"
    with harness.flushed() as db:
        chat = db.get(ChatSession, first.session_id)
        assert chat is not None and chat.closed_reason == "idle"
        assert [t.status for t in turns_of(db, first.session_id)] == [TurnStatus.skipped]


def test_restart_keeps_matching(harness: Harness) -> None:
    agent = OpenClawAgent("Fix the bug.")
    first = harness.agent_turn(agent, calls=[tool_call("read", {"path": "bug.py"}, "call_x")])
    agent.tool_results(["def f(): return 1/0"])
    harness.restart()  # drains the logger, then a new tracker rebuilds from the DB
    second = harness.agent_turn(agent, text="Division by zero on line 1.")
    assert (second.session_id, second.turn_index, second.source) == (first.session_id, 1, "inferred")
    with harness.flushed() as db:
        t0 = turns_of(db, first.session_id)[0]
        assert t0.next_state == [
            {"role": "tool", "tool_call_id": "call_x", "name": "read", "content": "def f(): return 1/0"}
        ]
        assert t0.id in harness.ready


def test_failed_turn_retry_continues_the_session(harness: Harness) -> None:
    agent = OpenClawAgent("Count to three.")
    first = harness.agent_turn(agent, text="1 2 3")
    agent.user("Now to four.")
    messages = agent.request()
    failed = harness.turn(messages, error="EngineError: boom")
    retry = harness.turn(messages, text="1 2 3 4")
    assert failed.session_id == retry.session_id == first.session_id
    assert (failed.turn_index, retry.turn_index) == (1, 2)
    with harness.flushed() as db:
        assert [t.status for t in turns_of(db, first.session_id)] == [
            "ready",
            "failed",
            "awaiting_next_state",
        ]


def test_concurrent_agents_from_threads(harness: Harness) -> None:
    agents = [OpenClawAgent(f"Job {i}") for i in range(8)]
    got: dict[int, list[Assignment]] = {i: [] for i in range(8)}

    def run(i: int) -> None:
        for step in range(5):
            got[i].append(harness.agent_turn(agents[i], text=f"step {step} of job {i}"))
            agents[i].user("go on")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for assignments in got.values():
        assert len({a.session_id for a in assignments}) == 1
        assert [a.turn_index for a in assignments] == [0, 1, 2, 3, 4]
    assert len({got[i][0].session_id for i in got}) == 8
    with harness.flushed() as db:
        assert len(harness.ready) == 8 * 4
        assert db.scalar(select(func.count()).select_from(Turn).where(Turn.status == TurnStatus.ready)) == 32
