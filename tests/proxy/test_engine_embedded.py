"""The embedded engine on the real SmolLM2-135M: batching, sampling, logprobs, aborts, adapters, limits.

Each test builds its own engine inside `asyncio.run`, so nothing leaks between tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from proxy.engines.base import (
    AdapterError,
    ContextLengthExceeded,
    EngineError,
    EngineUnavailable,
    GenerateRequest,
    SamplingParams,
)
from proxy.engines.embedded import EmbeddedEngine
from tests.utils.adapters import make_adapters

PROMPT_A = "Once upon a time, in a land far away, there lived"
PROMPT_B = "The three most important things to remember when you cook pasta at home are"


def _ids(model_path: str, text: str) -> list[int]:
    from core.modelload import load_tokenizer

    return list(load_tokenizer(model_path).encode(text, add_special_tokens=False))


async def _collect(engine: EmbeddedEngine, ids: list[int], *, n: int = 16, temperature: float = 0.0,
                   seed: int | None = None, adapter: str | None = None) -> dict[str, Any]:
    tokens: list[int] = []
    logprobs: list[float] = []
    times: list[float] = []
    finish = None
    params = SamplingParams(temperature=temperature, max_new_tokens=n, seed=seed)
    async for out in engine.generate(GenerateRequest("t", ids, params, adapter)):
        tokens += out.token_ids
        logprobs += out.logprobs
        times.append(time.perf_counter())
        finish = out.finish_reason
    return {"tokens": tokens, "logprobs": logprobs, "times": times, "finish": finish}


def _with_engine(model_path: str, body: Callable[[EmbeddedEngine], Awaitable[None]], *,
                 dtype: str = "float32", max_batch_size: int = 8, max_queue: int = 256) -> None:
    async def main() -> None:
        engine = EmbeddedEngine(model_path, device="cpu", dtype=dtype, max_batch_size=max_batch_size,
                                max_queue=max_queue)
        await engine.start()
        try:
            await body(engine)
        finally:
            await engine.stop()

    asyncio.run(main())


def test_two_concurrent_streams_are_decoded_together(model_path: str) -> None:
    a, b = _ids(model_path, PROMPT_A), _ids(model_path, PROMPT_B)

    async def body(engine: EmbeddedEngine) -> None:
        solo = await _collect(engine, a, n=32)
        steps_before = engine.steps
        first, second = await asyncio.gather(_collect(engine, a, n=32), _collect(engine, b, n=32))
        assert len(first["tokens"]) == len(second["tokens"]) == 32
        assert engine.max_rows_seen == 2
        # one forward per step served both rows: about 31 decode steps, not 62 (the speed-up itself
        # is measured by `learnproxy bench engine`, not timed here on shared cores)
        assert engine.steps - steps_before <= 33
        # the token timestamps interleave: each stream got tokens while the other was still running
        assert first["times"][0] < second["times"][-1] and second["times"][0] < first["times"][-1]
        assert solo["finish"] == "length"

    _with_engine(model_path, body, dtype="bfloat16")


def test_batched_greedy_matches_solo_with_different_prompt_lengths(model_path: str) -> None:
    """Left padding, the merged mask and per-row positions leave each row's output unchanged (fp32)."""
    a, b = _ids(model_path, PROMPT_A), _ids(model_path, "Hi")

    async def body(engine: EmbeddedEngine) -> None:
        solo_a = await _collect(engine, a, n=12)
        solo_b = await _collect(engine, b, n=12)
        both = await asyncio.gather(_collect(engine, a, n=12), _collect(engine, b, n=12))
        assert both[0]["tokens"] == solo_a["tokens"]
        assert both[1]["tokens"] == solo_b["tokens"]
        assert engine.max_rows_seen == 2

    _with_engine(model_path, body)


def test_logprobs_are_unscaled_and_seeds_reproduce(model_path: str) -> None:
    """The logprob of each sampled token is log_softmax of the temperature-1 logits."""
    from core.modelload import load_model

    ids = _ids(model_path, PROMPT_A)
    results: list[dict[str, Any]] = []

    async def body(engine: EmbeddedEngine) -> None:
        results.append(await _collect(engine, ids, n=10, temperature=0.7, seed=123))
        results.append(await _collect(engine, ids, n=10, temperature=0.7, seed=123))

    _with_engine(model_path, body)
    assert results[0]["tokens"] == results[1]["tokens"]
    model = load_model(model_path, "cpu", "float32")
    full = torch.tensor([ids + results[0]["tokens"]])
    with torch.no_grad():
        logits = model(input_ids=full).logits[0].float()
    expected = torch.log_softmax(logits[len(ids) - 1 : -1], dim=-1)
    reference = expected.gather(1, torch.tensor(results[0]["tokens"]).unsqueeze(1)).squeeze(1)
    assert torch.allclose(torch.tensor(results[0]["logprobs"]), reference, atol=2e-3)


def test_closing_the_stream_aborts_the_row(model_path: str) -> None:
    ids = _ids(model_path, PROMPT_A)

    async def body(engine: EmbeddedEngine) -> None:
        stream = engine.generate(GenerateRequest("gone", ids, SamplingParams(temperature=0.0,
                                                                             max_new_tokens=400)))
        got = 0
        async for _ in stream:
            got += 1
            if got == 3:
                break
        await stream.aclose()  # type: ignore[attr-defined]
        steps_at_close = engine.steps
        for _ in range(100):
            if engine.stats()["active"] == 0:
                break
            await asyncio.sleep(0.02)
        assert engine.stats()["active"] == 0
        await asyncio.sleep(0.3)
        assert engine.steps - steps_at_close <= 3  # generation stopped, far short of 400 tokens
        # the slot is free: a new request is served at once
        assert len((await _collect(engine, ids, n=3))["tokens"]) == 3

    _with_engine(model_path, body, max_batch_size=1)


def test_named_adapters_per_request_in_one_batch(model_path: str, tmp_path: Path) -> None:
    paths = make_adapters(model_path, tmp_path, 2)
    ids = _ids(model_path, PROMPT_A)

    async def body(engine: EmbeddedEngine) -> None:
        await engine.load_adapter("x", str(paths[0]))
        await engine.load_adapter("y", str(paths[1]))
        assert engine.loaded_adapters() == {"x", "y"}
        with pytest.raises(AdapterError):
            await engine.load_adapter("x", str(paths[1]))
        solo = {name: await _collect(engine, ids, n=8, adapter=name) for name in ("x", "y", None)}
        assert solo["x"]["tokens"] != solo[None]["tokens"]
        assert solo["y"]["tokens"] != solo["x"]["tokens"]
        mixed = await asyncio.gather(*(_collect(engine, ids, n=8, adapter=name) for name in ("x", "y", None)))
        assert [m["tokens"] for m in mixed] == [solo[name]["tokens"] for name in ("x", "y", None)]
        assert engine.max_rows_seen == 3
        await engine.unload_adapter("x")
        assert engine.loaded_adapters() == {"y"}
        with pytest.raises(AdapterError):
            engine.generate(GenerateRequest("u", ids, SamplingParams(max_new_tokens=2), "x"))
        assert (await _collect(engine, ids, n=8, adapter="y"))["tokens"] == solo["y"]["tokens"]

    _with_engine(model_path, body)


def test_overload_and_context_length(model_path: str) -> None:
    ids = _ids(model_path, PROMPT_A)

    async def body(engine: EmbeddedEngine) -> None:
        too_long = [ids[0]] * (engine.info.context_length - 10 + 1)
        with pytest.raises(ContextLengthExceeded):
            engine.generate(GenerateRequest("long", too_long, SamplingParams(max_new_tokens=10)))
        running = asyncio.create_task(_collect(engine, ids, n=40))
        while engine.stats()["active"] == 0:
            await asyncio.sleep(0.01)
        waiting = asyncio.create_task(_collect(engine, ids, n=2))
        while engine.stats()["queued"] == 0:
            await asyncio.sleep(0.01)
        with pytest.raises(EngineUnavailable):
            engine.generate(GenerateRequest("over", ids, SamplingParams(max_new_tokens=2)))
        assert len((await running)["tokens"]) == 40
        assert len((await waiting)["tokens"]) == 2

    _with_engine(model_path, body, max_batch_size=1, max_queue=1)


def test_a_failed_prefill_ends_its_request_and_spares_the_batch(model_path: str) -> None:
    """A prompt the model cannot run (a token id past the vocabulary makes the embedding lookup
    fail) gets an EngineError at once instead of a stream that never ends, and a request already
    decoding finishes untouched."""
    ids = _ids(model_path, PROMPT_A)

    async def body(engine: EmbeddedEngine) -> None:
        running = asyncio.create_task(_collect(engine, ids, n=24))
        while engine.stats()["active"] == 0:
            await asyncio.sleep(0.01)
        vocab = engine._model.get_input_embeddings().num_embeddings
        with pytest.raises(EngineError, match="prefill failed"):
            await asyncio.wait_for(_collect(engine, [vocab + 5], n=4), timeout=30)
        assert len((await running)["tokens"]) == 24
        assert len((await asyncio.wait_for(_collect(engine, ids, n=4), timeout=30))["tokens"]) == 4

    _with_engine(model_path, body)
