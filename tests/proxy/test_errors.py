"""The error table: every bad request and engine failure gets OpenAI's error shape and status.

Served by a real uvicorn server. The engine is the null engine; where a row needs the engine to
fail, `ScriptedEngine` raises the exceptions `proxy.engines.base` documents for a remote engine
(unreachable, slow, broken), the network edge a real SGLang failure would come through.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from core.db import make_engine, make_session_factory
from core.modelload import load_tokenizer
from core.models import Base, Turn
from core.settings import Settings
from proxy.app import create_app
from proxy.auth import check_access
from proxy.engines.base import EngineError, EngineUnavailable, GenerateRequest, StepOutput
from proxy.engines.null import NullEngine
from proxy.errors import AuthenticationError, PermissionDenied
from tests.utils.server import run_server

SECRET = "db password is hunter2 at /srv/secret.py line 42"
LIMIT = 64 * 1024
CONTEXT = 256


class ScriptedEngine(NullEngine):
    """The null engine, failing on demand: before the first token, or after `after` tokens."""

    def __init__(self, reply_ids: list[int]) -> None:
        super().__init__(reply_ids, context_length=CONTEXT)
        self.fail: BaseException | None = None
        self.after = 0
        self.stall_s = 0.0

    def generate(self, request: GenerateRequest) -> AsyncIterator[StepOutput]:
        inner = super().generate(request)
        return self._scripted(inner)

    async def _scripted(self, inner: AsyncIterator[StepOutput]) -> AsyncIterator[StepOutput]:
        n = 0
        async for step in inner:
            if self.stall_s:
                await asyncio.sleep(self.stall_s)
            if self.fail is not None and n >= self.after:
                raise self.fail
            n += 1
            yield step


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, model_path: str
) -> Iterator[tuple[str, ScriptedEngine, Settings]]:
    data = tmp_path_factory.mktemp("errors") / "data"
    settings = Settings(
        data_dir=data,
        model=model_path,
        enqueue=False,
        auto_train=False,
        max_body_bytes=LIMIT,
        engine_timeout_s=0.5,
    )
    db = make_engine(settings.db_url)
    Base.metadata.create_all(db)
    db.dispose()
    tokenizer = load_tokenizer(model_path)
    engine = ScriptedEngine(tokenizer.encode("Hello there, friend.", add_special_tokens=False))
    with run_server(create_app(settings, engine=engine)) as url:
        yield url, engine, settings


@pytest.fixture
def client(served: tuple[str, ScriptedEngine, Settings]) -> Iterator[httpx.Client]:
    url, engine, _ = served
    engine.fail, engine.after, engine.stall_s = None, 0, 0.0
    with httpx.Client(base_url=url, timeout=30) as c:
        yield c


def _model(client: httpx.Client) -> str:
    return client.get("/v1/models").json()["data"][0]["id"]


def _body(model: str, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    body.update(over)
    return {k: v for k, v in body.items() if v is not None}


BAD_TOOL = {"type": "function", "function": {"description": "no name"}}
ARRAY_SCHEMA_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}
GOOD_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}

# (case, body overrides or raw bytes, status, type, code, param)
ROWS: list[tuple[str, Any, int, str, str | None, str | None]] = [
    ("malformed json", b'{"model": "x", "messages": [', 400, "invalid_request_error", None, None),
    ("empty body", b"", 400, "invalid_request_error", None, None),
    ("body not an object", b"[1, 2]", 400, "invalid_request_error", None, None),
    ("missing messages", {"messages": None}, 400, "invalid_request_error", None, "messages"),
    ("empty messages", {"messages": []}, 400, "invalid_request_error", None, "messages"),
    (
        "bad role",
        {"messages": [{"role": "wizard", "content": "hi"}]},
        400,
        "invalid_request_error",
        None,
        "messages.0.role",
    ),
    (
        "content is a number",
        {"messages": [{"role": "user", "content": 7}]},
        400,
        "invalid_request_error",
        None,
        "messages.0.content",
    ),
    (
        "image part",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
        400,
        "invalid_request_error",
        None,
        "messages.0.content.0.type",
    ),
    (
        "user without content",
        {"messages": [{"role": "user"}]},
        400,
        "invalid_request_error",
        None,
        "messages.0",
    ),
    ("tool without name", {"tools": [BAD_TOOL]}, 400, "invalid_request_error", None, "tools.0.function.name"),
    (
        "tool schema not object",
        {"tools": [ARRAY_SCHEMA_TOOL]},
        400,
        "invalid_request_error",
        None,
        "tools.0.function.parameters",
    ),
    (
        "tool_choice unknown function",
        {"tools": [GOOD_TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}},
        400,
        "invalid_request_error",
        None,
        "tool_choice",
    ),
    ("n above one", {"n": 2}, 400, "invalid_request_error", None, "n"),
    ("temperature out of range", {"temperature": 3}, 400, "invalid_request_error", None, "temperature"),
    ("unknown model", {"model": "no-such-model"}, 404, "invalid_request_error", "model_not_found", "model"),
    (
        "prompt over context",
        {"messages": [{"role": "user", "content": "word " * 400}]},
        400,
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    ),
    (
        "max_tokens over context",
        {"max_tokens": CONTEXT},
        400,
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    ),
    (
        "body over limit",
        {"padding": "x" * (LIMIT + 1)},
        413,
        "invalid_request_error",
        "request_too_large",
        None,
    ),
]


def _check_error(resp: httpx.Response, status: int, type_: str, code: str | None, param: str | None) -> None:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert (err["type"], err["code"], err["param"]) == (type_, code, param)
    assert err["message"] and "Traceback" not in resp.text and SECRET not in resp.text


@pytest.mark.parametrize(("case", "over", "status", "type_", "code", "param"), ROWS, ids=[r[0] for r in ROWS])
@pytest.mark.parametrize("stream", [False, True])
def test_bad_requests(
    client: httpx.Client,
    case: str,
    over: Any,
    status: int,
    type_: str,
    code: str | None,
    param: str | None,
    stream: bool,
) -> None:
    if isinstance(over, bytes):
        resp = client.post("/v1/chat/completions", content=over, headers={"content-type": "application/json"})
    else:
        body = {k: v for k, v in {**_body(_model(client), stream=stream), **over}.items() if v is not None}
        resp = client.post("/v1/chat/completions", json=body)
    _check_error(resp, status, type_, code, param)


def test_streamed_body_over_limit_without_content_length(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"model": "x", "messages": [], "pad": "'
        for _ in range(LIMIT // 4096 + 2):
            yield b"x" * 4096
        yield b'"}'

    resp = client.post("/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in resp.request.headers  # sent chunked: only counting can catch it
    _check_error(resp, 413, "invalid_request_error", "request_too_large", None)


ENGINE_ROWS: list[tuple[str, BaseException | None, float, int, str, str | None]] = [
    (
        "engine unavailable",
        EngineUnavailable(SECRET, retry_after_s=7),
        0.0,
        503,
        "server_error",
        "engine_unavailable",
    ),
    ("engine broken", EngineError(SECRET), 0.0, 500, "server_error", "internal_error"),
    ("unexpected bug", RuntimeError(SECRET), 0.0, 500, "server_error", "internal_error"),
    ("engine too slow", None, 2.0, 504, "server_error", "engine_timeout"),
]


@pytest.mark.parametrize(
    ("case", "exc", "stall", "status", "type_", "code"), ENGINE_ROWS, ids=[r[0] for r in ENGINE_ROWS]
)
@pytest.mark.parametrize("stream", [False, True])
def test_engine_failures_before_the_first_token(
    client: httpx.Client,
    served: tuple[str, ScriptedEngine, Settings],
    case: str,
    exc: BaseException | None,
    stall: float,
    status: int,
    type_: str,
    code: str,
    stream: bool,
) -> None:
    _, engine, _ = served
    engine.fail, engine.stall_s = exc, stall
    resp = client.post("/v1/chat/completions", json=_body(_model(client), stream=stream))
    _check_error(resp, status, type_, code, None)
    if status == 503:
        assert resp.headers["retry-after"] == "7"


def test_failure_mid_stream_sends_error_event_then_done(
    client: httpx.Client, served: tuple[str, ScriptedEngine, Settings]
) -> None:
    _, engine, _ = served
    engine.fail, engine.after = EngineError(SECRET), 2
    with client.stream("POST", "/v1/chat/completions", json=_body(_model(client), stream=True)) as resp:
        assert resp.status_code == 200
        events = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert (error["type"], error["code"]) == ("server_error", "internal_error")
    assert SECRET not in "".join(events)
    assert any(json.loads(e).get("choices", [{}])[0].get("delta", {}).get("content") for e in events[1:-2])


def test_failed_generations_are_logged(
    client: httpx.Client, served: tuple[str, ScriptedEngine, Settings]
) -> None:
    """Runs after the rows above: each failure after session assignment left a turn with its error."""
    _, engine, settings = served
    engine.fail, engine.after = EngineError(SECRET), 1
    client.post(
        "/v1/chat/completions", json=_body(_model(client), messages=[{"role": "user", "content": "log me"}])
    )
    db = make_engine(settings.db_url)
    factory = make_session_factory(db)
    for _ in range(50):  # the write-behind logger commits every log_flush_interval_s
        with factory() as session:
            turns = session.scalars(select(Turn).where(Turn.error.is_not(None))).all()
            if any(t.error and SECRET in t.error for t in turns):
                break
        asyncio.run(asyncio.sleep(0.1))
    db.dispose()
    assert any(t.error and SECRET in t.error for t in turns)  # stored for review, never sent


def test_auth_with_keys(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, api_keys=["k1", "k2"])
    check_access(settings, "Bearer k2", "10.0.0.5")
    for header in (None, "Bearer nope", "k1", "Basic k1", "Bearer "):
        with pytest.raises(AuthenticationError):
            check_access(settings, header, "127.0.0.1")


def test_open_proxy_serves_loopback_only(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    for host in ("127.0.0.1", "::1", "127.0.0.2"):
        check_access(settings, None, host)
    outside: list[str | None] = ["10.0.0.5", "192.168.1.2", None]
    for remote in outside:
        with pytest.raises(PermissionDenied):
            check_access(settings, None, remote)


def test_missing_key_over_http_is_401(tmp_path: Path, model_path: str) -> None:
    settings = Settings(data_dir=tmp_path / "data", model=model_path, enqueue=False, api_keys=["sekrit"])
    db = make_engine(settings.db_url)
    Base.metadata.create_all(db)
    db.dispose()
    with run_server(create_app(settings, engine=NullEngine([1, 2, 3]))) as url:
        resp = httpx.get(f"{url}/v1/models", timeout=30)
        _check_error(resp, 401, "invalid_request_error", "invalid_api_key", None)
        ok = httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer sekrit"}, timeout=30)
        assert ok.status_code == 200 and ok.json()["data"]
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200
