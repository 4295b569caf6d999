"""Judge test fixtures: turns written straight into the DB, and a scripted remote judge.

The scripted judge is an OpenAI-compatible server standing in for a remote judge endpoint at the
network edge (any `LEARNPROXY_JUDGE_URL`). It follows the Chat Completions response shape field for
field (https://platform.openai.com/docs/api-reference/chat/object): `id`, `object`,
`created`, `model`, `choices[].message.{role,content}`, `choices[].finish_reason`, `usage`. Asked to
stream, it answers server-sent events in the chunk shape of
https://platform.openai.com/docs/api-reference/chat-streaming: `data: {"id", "object":
"chat.completion.chunk", "created", "model", "choices": [{"index", "delta", "finish_reason"}]}` lines,
a last chunk with `finish_reason`, then `data: [DONE]`. It runs under a real uvicorn server in a
thread, so worker subprocesses reach it over real HTTP.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from sqlalchemy.orm import Session

from core.blobs import insert_blobs, json_row
from core.models import ChatSession, Turn, TurnStatus, utcnow
from tests.utils.server import run_server

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
    chunk_delay_s: float = 0.0  # streamed replies: pause before each word (a slow but steady judge)
    fail_mid_stream: bool = False  # streamed replies: an error event after the first word
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
    async def chat(request: Request) -> Response:
        body = await request.json()
        judge.requests.append(body)
        judge.headers.append(dict(request.headers))
        if judge.delay_s:
            await asyncio.sleep(judge.delay_s)
        if judge.status != 200:
            return JSONResponse({"error": {"message": "overloaded", "type": "server_error", "param": None,
                                           "code": None}}, status_code=judge.status)
        text = judge.next_reply(kind_of(body))
        rid, created = f"chatcmpl-{len(judge.requests)}", int(time.time())
        if body.get("stream"):
            return StreamingResponse(stream(judge, text, rid, created, body["model"]),
                                     media_type="text/event-stream")
        return JSONResponse({
            "id": rid, "object": "chat.completion", "created": created, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        })

    return app


async def stream(judge: ScriptedJudge, text: str, rid: str, created: int, model: str) -> Any:
    def chunk(delta: dict[str, str], finish: str | None = None) -> str:
        return "data: " + json.dumps({"id": rid, "object": "chat.completion.chunk", "created": created,
                                      "model": model, "choices": [{"index": 0, "delta": delta,
                                                                   "finish_reason": finish}]}) + "\n\n"

    yield chunk({"role": "assistant", "content": ""})
    for i, word in enumerate(text.split(" ")):
        await asyncio.sleep(judge.chunk_delay_s)
        if judge.fail_mid_stream and i == 1:
            error = {"message": "engine failed", "type": "server_error", "param": None, "code": None}
            yield "data: " + json.dumps({"error": error}) + "\n\n"
            return
        yield chunk({"content": word if i == 0 else " " + word})
    yield chunk({}, "stop")
    yield "data: [DONE]\n\n"


@pytest.fixture
def judge_server() -> Iterator[ScriptedJudge]:
    judge = ScriptedJudge()
    # port 0: no pick-then-bind race between test processes; a request still held by `delay_s` is not
    # waited for at shutdown
    with run_server(build_app(judge), timeout_graceful_shutdown=1) as url:
        judge.url = f"{url}/v1"
        yield judge


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
