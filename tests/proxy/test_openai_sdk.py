"""The official `openai` SDK against a real uvicorn server: plain, streamed, usage and tool calls.

Plain and streamed replies come from the real embedded engine on SmolLM2-135M (short replies, the
machine has 2 cores). The 135M model does not call tools reliably, so the tool round trip runs on
the null engine replying with a fixed Hermes `<tool_call>`: what it checks is the proxy's parsing,
streaming deltas and rendering of the `role: tool` reply, not the model's judgement.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from sqlalchemy import select

from core.db import make_engine, make_session_factory
from core.modelload import load_tokenizer
from core.models import Base, Turn
from core.settings import Settings
from core.turns import load_turn
from proxy.app import create_app
from proxy.engines.null import NullEngine
from tests.utils.server import run_server

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _settings(tmp: Path, model_path: str) -> Settings:
    settings = Settings(data_dir=tmp / "data", model=model_path, enqueue=False, auto_train=False)
    db = make_engine(settings.db_url)
    Base.metadata.create_all(db)
    db.dispose()
    return settings


@pytest.fixture(scope="module")
def embedded(
    tmp_path_factory: pytest.TempPathFactory, model_path: str
) -> Iterator[tuple[openai.OpenAI, str]]:
    from proxy.engines.embedded import EmbeddedEngine

    settings = _settings(tmp_path_factory.mktemp("sdk"), model_path)
    engine = EmbeddedEngine(model_path, device="cpu", dtype="auto", max_batch_size=4)
    with run_server(create_app(settings, engine=engine)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=120, max_retries=0)
        yield client, client.models.list().data[0].id


def test_non_streaming(embedded: tuple[openai.OpenAI, str]) -> None:
    client, model = embedded
    out = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0, seed=1
    )
    assert out.id.startswith("chatcmpl-") and out.model == model
    choice = out.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert out.usage is not None and 0 < out.usage.completion_tokens <= 8
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens


def test_streaming_with_usage(embedded: tuple[openai.OpenAI, str]) -> None:
    client, model = embedded
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Count from one to ten."}],
        max_completion_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
        temperature=0,
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 1  # really streamed, token by token
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason in ("stop", "length")
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert 0 < last.usage.completion_tokens <= 12
    assert all(c.usage is None for c in chunks[:-1])


@pytest.fixture
def tool_server(tmp_path: Path, model_path: str) -> Iterator[tuple[openai.OpenAI, str, Settings]]:
    settings = _settings(tmp_path, model_path)
    tokenizer = load_tokenizer(model_path)
    engine = NullEngine(tokenizer.encode(CALL, add_special_tokens=False), eos_id=tokenizer.eos_token_id)
    with run_server(create_app(settings, engine=engine)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=60, max_retries=0)
        yield client, client.models.list().data[0].id, settings


def test_tool_call_round_trip(tool_server: tuple[openai.OpenAI, str, Settings]) -> None:
    client, model, settings = tool_server
    history: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.chat.completions.create(model=model, messages=history, tools=TOOLS, tool_choice="auto")
    msg = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert msg.content is None and msg.tool_calls and len(msg.tool_calls) == 1
    call = msg.tool_calls[0]
    assert call.type == "function"
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}

    # The agent's way back: content null + tool_calls, then a tool message with no name.
    history.append({"role": "assistant", "content": None, "tool_calls": [call.model_dump()]})
    history.append({"role": "tool", "tool_call_id": call.id, "content": "18C and sunny"})
    stream = client.chat.completions.create(model=model, messages=history, tools=TOOLS, stream=True)
    deltas = [tc for c in stream if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id and deltas[0].function and deltas[0].function.name == "get_weather"
    assert deltas[0].function.arguments == ""
    args = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert json.loads(args) == {"city": "Paris"}

    db = make_engine(settings.db_url)
    views: list[Any] = []
    for _ in range(100):  # the write-behind logger commits every log_flush_interval_s
        with make_session_factory(db)() as session:
            views = [load_turn(session, i) for i in session.scalars(select(Turn.id).order_by(Turn.id)).all()]
        if len(views) == 2:
            break
        time.sleep(0.05)
    db.dispose()
    # The second turn's prompt shows the model the call and its result in Hermes form.
    second = next(v for v in views if v is not None and len(v.messages) == 3)
    prompt = load_tokenizer(settings.model).decode(second.prompt_token_ids)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<tool_response>\n18C and sunny\n</tool_response>" in prompt
