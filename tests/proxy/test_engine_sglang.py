"""The SGLang engine against a fake SGLang server served by a real uvicorn in a thread.

SGLang needs a GPU, so the fake follows the documented API field for field:
- docs.sglang.io `basic_usage/native_api` and `basic_usage/sampling_params`: `/generate` takes
  `input_ids`, `sampling_params` {temperature, top_p, max_new_tokens, stop_token_ids, sampling_seed},
  `stream`, `return_logprob`, `logprob_start_len`, `lora_path`, `rid`; it streams `data: {json}` lines
  ending with `data: [DONE]`; `meta_info.output_token_logprobs` is a list of [logprob, token_id, text|null]
  and `meta_info.finish_reason` is {"type": "stop"|"length"|"abort", ...}.
- `python/sglang/srt/managers/tokenizer_manager_components/output_processor.py`: streamed `output_ids`
  and logprobs are cumulative unless the server runs with `--incremental-streaming-output`.
- docs.sglang.io `advanced_features/lora` and `python/sglang/srt/entrypoints/http_server.py`:
  `/load_lora_adapter` {lora_name, lora_path, pinned} and `/unload_lora_adapter` {lora_name} answer
  LoRAUpdateOutput {success, error_message, loaded_adapters}, 400 when success is false; `/health` is 200.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict

from proxy.engines.base import (
    AdapterError,
    ContextLengthExceeded,
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    GenerateRequest,
    SamplingParams,
)
from proxy.engines.sglang import SGLangEngine
from tests.utils.server import run_server

EOS = 2


class FakeSampling(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a field SGLang does not document fails the test
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    stop_token_ids: list[int] | None = None
    sampling_seed: int | None = None


class FakeGenerate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_ids: list[int]
    sampling_params: FakeSampling
    stream: bool = False
    return_logprob: bool = False
    logprob_start_len: int = -1
    lora_path: str | None = None
    rid: str | None = None


class FakeLoad(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lora_name: str
    lora_path: str
    pinned: bool = False


class FakeUnload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lora_name: str


def fake_sglang(*, incremental: bool = False, reply: list[int] | None = None,
                delay_s: float = 0.0) -> FastAPI:
    """A fake SGLang: replies `reply` (+ EOS), shifted by 100 when a LoRA is named, to tell them apart."""
    app = FastAPI()
    app.state.loras = {}
    app.state.requests = []
    app.state.fail_status = None
    tokens = reply or [11, 12, 13, 14, 15]

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({}, status_code=app.state.fail_status or 200)

    @app.post("/generate", response_model=None)
    async def generate(body: FakeGenerate) -> StreamingResponse | JSONResponse:
        app.state.requests.append(body)
        if app.state.fail_status:
            return JSONResponse({"error": {"message": "down"}}, status_code=app.state.fail_status)
        if body.lora_path is not None and body.lora_path not in app.state.loras:
            return JSONResponse({"error": {"message": "unknown lora"}}, status_code=400)
        shift = 100 if body.lora_path else 0
        out = [t + shift for t in tokens] + [EOS]
        out = out[: body.sampling_params.max_new_tokens]
        stops = set(body.sampling_params.stop_token_ids or []) | {EOS}
        for i, tok in enumerate(out):
            if tok in stops:
                out = out[: i + 1]
                break
        events = _events(out, stops, body, incremental, delay_s)
        return StreamingResponse(events, media_type="text/event-stream")

    @app.post("/load_lora_adapter")
    async def load(body: FakeLoad) -> JSONResponse:
        if body.lora_name in app.state.loras:
            return JSONResponse({"success": False, "error_message": "already loaded",
                                 "loaded_adapters": app.state.loras}, status_code=400)
        app.state.loras[body.lora_name] = body.lora_path
        return JSONResponse({"success": True, "error_message": None, "loaded_adapters": app.state.loras})

    @app.post("/unload_lora_adapter")
    async def unload(body: FakeUnload) -> JSONResponse:
        if app.state.loras.pop(body.lora_name, None) is None:
            return JSONResponse({"success": False, "error_message": "not loaded",
                                 "loaded_adapters": app.state.loras}, status_code=400)
        return JSONResponse({"success": True, "error_message": None, "loaded_adapters": app.state.loras})

    return app


async def _events(out: list[int], stops: set[int], body: FakeGenerate, incremental: bool,
                  delay_s: float) -> AsyncIterator[bytes]:
    rows = [[-0.1 * (i + 1), tok, None] for i, tok in enumerate(out)]
    for i in range(len(out)):
        if delay_s:
            await asyncio.sleep(delay_s)
        done = i == len(out) - 1
        finish = None
        if done:
            finish = {"type": "stop", "matched": out[-1]} if out[-1] in stops else \
                {"type": "length", "length": len(out)}
        lo = i if incremental else 0
        chunk = {"text": "", "output_ids": out[lo : i + 1],
                 "meta_info": {"id": body.rid, "finish_reason": finish, "prompt_tokens": len(body.input_ids),
                               "completion_tokens": i + 1, "output_token_logprobs": rows[lo : i + 1]}}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


@pytest.fixture
def server() -> Iterator[tuple[str, FastAPI]]:
    app = fake_sglang()
    with run_server(app) as url:
        yield url, app


def _engine(url: str, **kw: Any) -> SGLangEngine:
    return SGLangEngine(url, timeout_s=kw.pop("timeout_s", 10.0), context_length=1024,
                        eos_token_ids=[EOS], **kw)


async def _run(engine: SGLangEngine,
               request: GenerateRequest) -> tuple[list[int], list[float], list[str | None]]:
    ids: list[int] = []
    logprobs: list[float] = []
    finishes: list[str | None] = []
    async for out in engine.generate(request):
        ids += out.token_ids
        logprobs += out.logprobs
        finishes.append(out.finish_reason)
    return ids, logprobs, finishes


def _req(adapter: str | None = None, **params: Any) -> GenerateRequest:
    return GenerateRequest("r1", [1, 5, 7], SamplingParams(**params), adapter)


@pytest.mark.parametrize("incremental", [False, True])
def test_stream_yields_each_token_once_with_its_logprob(incremental: bool) -> None:
    app = fake_sglang(incremental=incremental)

    async def main(url: str) -> None:
        engine = _engine(url, incremental_stream=incremental)
        await engine.start()
        ids, logprobs, finishes = await _run(engine, _req(temperature=0.5, seed=7, stop_token_ids=(99,)))
        await engine.stop()
        assert ids == [11, 12, 13, 14, 15, EOS]
        assert logprobs == pytest.approx([-0.1, -0.2, -0.3, -0.4, -0.5, -0.6])
        assert finishes[-1] == "stop" and all(f is None for f in finishes[:-1])
        sent = app.state.requests[-1]
        assert sent.input_ids == [1, 5, 7] and sent.stream and sent.return_logprob
        assert sent.logprob_start_len == 3  # only output-token logprobs come back
        assert sent.sampling_params.sampling_seed == 7 and sent.sampling_params.stop_token_ids == [99]
        assert sent.lora_path is None

    with run_server(app) as url:
        asyncio.run(main(url))


def test_length_finish_and_adapter_lifecycle(server: tuple[str, FastAPI]) -> None:
    url, app = server

    async def main() -> None:
        engine = _engine(url)
        await engine.start()
        ids, _, finishes = await _run(engine, _req(max_new_tokens=3))
        assert ids == [11, 12, 13] and finishes[-1] == "length"
        await engine.load_adapter("v1", "/adapters/v1")
        assert app.state.loras == {"v1": "/adapters/v1"} and engine.loaded_adapters() == {"v1"}
        with pytest.raises(AdapterError):
            await engine.load_adapter("v1", "/adapters/v1")
        ids, _, _ = await _run(engine, _req("v1", max_new_tokens=2))
        assert ids == [111, 112] and app.state.requests[-1].lora_path == "v1"
        await engine.unload_adapter("v1")
        assert app.state.loras == {} and engine.loaded_adapters() == set()
        with pytest.raises(AdapterError):
            await engine.unload_adapter("v1")  # the server answers 400 success=false
        with pytest.raises(EngineError):
            await _run(engine, _req("v1"))  # unknown adapter: a 4xx from /generate
        assert await engine.health()
        await engine.stop()

    asyncio.run(main())


def test_server_errors_map_to_engine_errors(server: tuple[str, FastAPI]) -> None:
    url, app = server

    async def main() -> None:
        engine = _engine(url)
        await engine.start()
        with pytest.raises(ContextLengthExceeded):
            engine.generate(GenerateRequest("x", [1] * 1020, SamplingParams(max_new_tokens=10)))
        app.state.fail_status = 503
        with pytest.raises(EngineUnavailable):
            await _run(engine, _req())
        assert not await engine.health()
        app.state.fail_status = None
        await engine.stop()

        with socket.socket() as sock:  # a port with nobody listening
            sock.bind(("127.0.0.1", 0))
            dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
        down = _engine(dead)
        await down.start()
        with pytest.raises(EngineUnavailable):
            await _run(down, _req())
        with pytest.raises(EngineUnavailable):
            await down.load_adapter("v", "/p")
        await down.stop()

    asyncio.run(main())


def test_timeout_is_engine_timeout() -> None:
    app = fake_sglang(delay_s=1.0)

    async def main(url: str) -> None:
        engine = _engine(url, timeout_s=0.3)
        await engine.start()
        with pytest.raises(EngineTimeout):
            await _run(engine, _req())
        await engine.stop()

    with run_server(app) as url:
        asyncio.run(main(url))


def test_closing_early_ends_the_http_stream() -> None:
    app = fake_sglang(delay_s=0.05, reply=list(range(20, 60)))

    async def main(url: str) -> None:
        engine = _engine(url)
        await engine.start()
        stream = engine.generate(_req())
        got = []
        async for out in stream:
            got += out.token_ids
            if len(got) == 2:
                break
        await stream.aclose()  # type: ignore[attr-defined]
        assert got == [20, 21]
        ids, _, _ = await _run(engine, _req(max_new_tokens=2))  # the client still works
        assert ids == [20, 21]
        await engine.stop()

    with run_server(app) as url:
        asyncio.run(main(url))
