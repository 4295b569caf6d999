"""DB factories for tests: sessions, turns (with real blobs), votes, labels and adapter versions.

Turns are written the way the proxy's logger writes them: messages and tools as content-addressed
blobs through `core.blobs`, token ids and logprobs packed with `core.tokens`. Each factory adds and
flushes; the test commits when it wants the rows visible to other sessions.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.blobs import ids_rows, insert_blobs, json_row
from core.models import AdapterState, AdapterVersion, ChatSession, Label, Turn, TurnStatus, Vote, utcnow
from core.tokens import pack_floats, pack_ids

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file from the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


def make_session(
    db: Session, *, id: str | None = None, source: str = "header", created_at: datetime | None = None
) -> ChatSession:
    created = created_at or utcnow()
    chat = ChatSession(
        id=id or f"sess-{uuid.uuid4().hex[:10]}",
        source=source,
        created_at=created,
        last_seen_at=created,
        n_turns=0,
        client={"user_agent": "pytest"},
    )
    db.add(chat)
    db.flush()
    return chat


def make_turn(
    db: Session,
    chat: ChatSession,
    *,
    messages: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
    response_text: str = "Sure, here it is.",
    tool_calls: list[dict[str, Any]] | None = None,
    prompt_token_ids: list[int] | None = None,
    response_token_ids: list[int] | None = None,
    response_logprobs: list[float] | None = None,
    next_state: list[dict[str, Any]] | None = None,
    created_at: datetime | None = None,
    **columns: Any,
) -> Turn:
    """A logged turn appended to `chat`. Extra keyword arguments set `Turn` columns directly."""
    messages = messages if messages is not None else [SYSTEM, {"role": "user", "content": "Hello there"}]
    prompt_ids = prompt_token_ids if prompt_token_ids is not None else list(range(1, 41))
    resp_ids = response_token_ids if response_token_ids is not None else [101, 102, 103, 104]
    logprobs = response_logprobs if response_logprobs is not None else [-0.5] * len(resp_ids)
    message_rows = [json_row(m) for m in messages]
    tool_row = json_row(tools) if tools is not None else None
    token_rows = ids_rows(prompt_ids)
    insert_blobs(db, message_rows + token_rows + ([tool_row] if tool_row else []))
    index = db.scalar(select(func.count(Turn.id)).where(Turn.session_id == chat.id)) or 0
    when = created_at or utcnow()
    turn = Turn(
        session_id=chat.id,
        turn_index=index,
        turn_type=columns.pop("turn_type", "main"),
        status=columns.pop("status", TurnStatus.awaiting_next_state),
        request_id=f"req-{uuid.uuid4().hex[:12]}",
        model=columns.pop("model", "learnproxy"),
        created_at=when,
        message_refs=[r["hash"] for r in message_rows],
        tools_ref=tool_row["hash"] if tool_row else None,
        params=columns.pop("params", {"temperature": 0.7}),
        response_text=response_text,
        tool_calls=tool_calls,
        finish_reason=columns.pop("finish_reason", "tool_calls" if tool_calls else "stop"),
        prompt_token_refs=[r["hash"] for r in token_rows],
        prompt_len=len(prompt_ids),
        response_token_ids=pack_ids(resp_ids),
        response_logprobs=pack_floats(logprobs),
        n_response_tokens=len(resp_ids),
        queue_ms=1.0,
        ttft_ms=20.0,
        total_ms=80.0,
        next_state=next_state,
        next_state_at=when + timedelta(seconds=5) if next_state else None,
        **columns,
    )
    db.add(turn)
    chat.n_turns = index + 1
    chat.last_seen_at = max(chat.last_seen_at, when)
    db.flush()
    return turn


def make_vote(
    db: Session,
    turn: Turn,
    *,
    kind: str = "prm",
    score: int | None = 1,
    raw_text: str | None = None,
    hint: str | None = None,
    vote_index: int | None = None,
) -> Vote:
    if vote_index is None:
        vote_index = (
            db.scalar(select(func.count(Vote.id)).where(Vote.turn_id == turn.id, Vote.kind == kind)) or 0
        )
    if raw_text is None:
        body = f"[HINT_START]{hint}[HINT_END]" if hint else "The reply answered the request."
        raw_text = f"{body} \\boxed{{{score}}}"
    vote = Vote(
        turn_id=turn.id,
        kind=kind,
        vote_index=vote_index,
        raw_text=raw_text,
        score=score,
        hint=hint,
        judge_model="SmolLM2-135M-Instruct",
        template_name="prm" if kind == "prm" else "hint",
        template_version="1",
        latency_ms=12.5,
    )
    db.add(vote)
    db.flush()
    return vote


def make_label(
    db: Session,
    turn: Turn,
    *,
    value: int = 1,
    hint: str | None = None,
    author: str = "tester",
    created_at: datetime | None = None,
) -> Label:
    label = Label(turn_id=turn.id, value=value, hint=hint, author=author, created_at=created_at or utcnow())
    db.add(label)
    db.flush()
    return label


def make_adapter_version(
    db: Session,
    *,
    id: int | None = None,
    state: str = AdapterState.ready,
    parent_id: int | None = None,
    metrics: dict[str, Any] | None = None,
    n_samples: int = 16,
    method: str = "combined",
) -> AdapterVersion:
    if id is None:
        id = (db.scalar(select(func.max(AdapterVersion.id))) or 0) + 1
    version = AdapterVersion(
        id=id,
        name=f"lp-v{id}-{uuid.uuid4().hex[:6]}",
        parent_id=parent_id,
        state=state,
        path=f"/tmp/adapters/v{id}",
        base_model="SmolLM2-135M-Instruct",
        method=method,
        config={"lora_r": 8, "lr": 1e-4},
        metrics=metrics if metrics is not None else {"loss": 0.42, "kl": 0.01},
        n_samples=n_samples,
    )
    db.add(version)
    db.flush()
    return version


def judged_session(db: Session, *, n_turns: int = 3, adapter: AdapterVersion | None = None) -> ChatSession:
    """A tool-using session whose turns carry votes, a hint candidate and alternating scores."""
    chat = make_session(db)
    history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "What is in notes.txt?"}]
    for i in range(n_turns):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
        }
        result = {"role": "tool", "tool_call_id": f"call_{i}", "content": f"line {i}: buy milk"}
        score = 1 if i % 2 == 0 else -1
        turn = make_turn(
            db,
            chat,
            messages=list(history),
            tools=TOOLS,
            response_text=f"Let me read it (step {i}).",
            tool_calls=[call],
            next_state=[result],
            score=score,
            score_source="votes",
            score_reason="majority of 3 votes",
            judge_status="ok",
            status=TurnStatus.judged,
            hint="Read the file before answering." if i == 0 else None,
            hint_source="judge" if i == 0 else None,
            adapter_version_id=adapter.id if adapter else None,
            advantage={"mean": 0.31, "rl": float(score), "opd": 0.12} if i == 0 else None,
        )
        for k in range(3):
            make_vote(db, turn, score=score if k < 2 else -score, vote_index=k)
        make_vote(db, turn, kind="hint", score=1, hint="Read the file before answering.", vote_index=0)
        history += [{"role": "assistant", "content": None, "tool_calls": [call]}, result]
    return chat
