"""Judge test fixtures: turns written straight into the DB, and a scripted remote judge.

The scripted judge is an OpenAI-compatible server standing in for a remote judge endpoint at the
network edge (any `LEARNPROXY_JUDGE_URL`). It follows the Chat Completions response shape field for
field (https://platform.openai.com/docs/api-reference/chat/object): `id`, `object`,
`created`, `model`, `choices[].message.{role,content}`, `choices[].finish_reason`, `usage`. It runs
under a real uvicorn server in a thread, so worker subprocesses reach it over real HTTP.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from core.blobs import insert_blobs, json_row
from core.models import ChatSession, Turn, TurnStatus, utcnow

PRM_YES = "The tool call succeeded and the user thanked the assistant.\n\\boxed{1}"
PRM_NO = "The user says the answer is wrong.\n\\boxed{-1}"
HINT = ("\\boxed{1}\n[HINT_START]The file is config.yaml, not config.yml; read config.yaml "
        "instead.[HINT_END]")


@dataclass
class ScriptedJudge:
    """Replies in turn from `prm` or `hint` (chosen by the prompt), records every request."""

    prm: list[str] = field(default_factory=lambda: [PRM_YES])
    hint: list[str] = field(default_factory=lambda: [HINT])
    status: int = 200  # set 503 to play an endpoint that is down
    delay_s: float = 0.0  # set to hold requests (a task in flight)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _counters: dict[str, itertools.count[int]] = field(default_factory=dict)

    def next_reply(self, kind: str) -> str:
        with self._lock:
            n = next(self._counters.setdefault(kind, itertools.count()))
        replies = self.hint if kind == "hint" else self.prm
        return replies[n % len(replies)]

    def kinds(self) -> list[str]:
        return [kind_of(r) for r in self.requests]


def kind_of(body: dict[str, Any]) -> str:
    return "hint" if "[HINT_START]" in body["messages"][-1]["content"] else "prm"


def build_app(judge: ScriptedJudge) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        judge.requests.append(body)
        judge.headers.append(dict(request.headers))
        if judge.delay_s:
            import asyncio

            await asyncio.sleep(judge.delay_s)
        if judge.status != 200:
            return JSONResponse({"error": {"message": "overloaded", "type": "server_error", "param": None,
                                           "code": None}}, status_code=judge.status)
        text = judge.next_reply(kind_of(body))
        return JSONResponse({
            "id": f"chatcmpl-{len(judge.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        })

    return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def judge_server() -> Iterator[ScriptedJudge]:
    judge = ScriptedJudge()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(judge), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    judge.url = f"http://127.0.0.1:{port}/v1"
    yield judge
    server.should_exit = True
    thread.join(timeout=5)


def add_turn(
    session: Session,
    *,
    next_state: list[dict[str, Any]] | None,
    request: str = "Read config.yml and tell me the port.",
    response_text: str = "",
    tool_calls: list[dict[str, Any]] | None = None,
    turn_type: str = "main",
    status: str = TurnStatus.ready,
    session_id: str = "s1",
    turn_index: int | None = None,
) -> int:
    """A logged turn as the proxy writes it (messages in blobs), committed; returns its id."""
    if session.get(ChatSession, session_id) is None:
        session.add(ChatSession(id=session_id, source="header"))
    messages = [{"role": "system", "content": "You are a helpful agent."}, {"role": "user", "content": request}]
    rows = [json_row(m) for m in messages]
    insert_blobs(session, rows)
    index = turn_index if turn_index is not None else session.query(Turn).filter_by(session_id=session_id).count()
    turn = Turn(
        session_id=session_id, turn_index=index, turn_type=turn_type, status=status, request_id=f"req-{index}",
        model="learnproxy", message_refs=[r["hash"] for r in rows], params={}, response_text=response_text,
        tool_calls=tool_calls, next_state=next_state, next_state_at=utcnow() if next_state is not None else None,
    )
    session.add(turn)
    session.commit()
    return turn.id


def tool_call(name: str, arguments: str) -> list[dict[str, Any]]:
    return [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]
