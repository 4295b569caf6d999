"""The SGLang engine: the engine interface over SGLang's native HTTP API (token ids in, ids out).

Endpoints used (docs.sglang.io `basic_usage/native_api`, `basic_usage/sampling_params`,
`advanced_features/lora`; source `python/sglang/srt/entrypoints/http_server.py`):

    POST /generate             input_ids, sampling_params, stream, return_logprob,
                               logprob_start_len, lora_path
    POST /load_lora_adapter    {lora_name, lora_path, pinned}
    POST /unload_lora_adapter  {lora_name}
    GET  /health

Streaming: the server answers SSE lines `data: {json}` and ends with `data: [DONE]`. By default
(`--incremental-streaming-output` off) every chunk carries the CUMULATIVE `output_ids` and
`meta_info.output_token_logprobs` so far (`tokenizer_manager_components/output_processor.py`); with it
on, each chunk carries only the new ones. We take `output_ids[seen:]` in the default mode, and
`incremental_stream=True` reads deltas.

Logprobs: SGLang's sampler returns `log_softmax(logits / temperature)` (after temperature, before
top-p/top-k) unless the server runs with `SGLANG_RETURN_ORIGINAL_LOGPROB=1`, which returns the
unscaled `log_softmax(logits)` our interface promises. `learnproxy sglang-command` sets it. At
temperature 0 (greedy) both are the unscaled logprobs. `sampling_seed` is honoured only with
`--enable-deterministic-inference`.

Errors: connection failures and 5xx become `EngineUnavailable`, timeouts `EngineTimeout`, a
failed load/unload `AdapterError`; a 4xx or an `error` chunk on /generate is an `EngineError`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from proxy.engines.base import (
    AdapterError,
    ContextLengthExceeded,
    EngineError,
    EngineInfo,
    EngineTimeout,
    EngineUnavailable,
    GenerateRequest,
    StepOutput,
)

log = logging.getLogger(__name__)

_HEALTH_TIMEOUT_S = 5.0


def generate_payload(request: GenerateRequest, *, stream: bool = True) -> dict[str, Any]:
    """The /generate body for one request, field for field as SGLang documents it."""
    params = request.params
    sampling: dict[str, Any] = {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_new_tokens": params.max_new_tokens,
    }
    if params.stop_token_ids:
        sampling["stop_token_ids"] = list(params.stop_token_ids)
    if params.seed is not None:
        sampling["sampling_seed"] = params.seed
    payload: dict[str, Any] = {
        "input_ids": request.input_ids,
        "sampling_params": sampling,
        "stream": stream,
        "return_logprob": True,
        # logprobs from the last prompt position on: only the output tokens' logprobs come back
        "logprob_start_len": len(request.input_ids),
        "rid": request.request_id,
    }
    if request.adapter is not None:
        payload["lora_path"] = request.adapter
    return payload


def _finish_reason(meta: dict[str, Any]) -> str | None:
    reason = meta.get("finish_reason")
    if reason is None:
        return None
    kind = reason.get("type") if isinstance(reason, dict) else str(reason)
    return {"stop": "stop", "length": "length", "abort": "abort"}.get(str(kind), "stop")


class SGLangEngine:
    """A remote SGLang server; see the module docstring for the API and its quirks."""

    def __init__(self, base_url: str, *, timeout_s: float, context_length: int, eos_token_ids: list[int],
                 incremental_stream: bool = False, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.incremental_stream = incremental_stream
        self.info = EngineInfo(name="sglang", context_length=context_length,
                               eos_token_ids=list(eos_token_ids))
        self._transport = transport  # the test seam: httpx.ASGITransport around a fake server
        self._client: httpx.AsyncClient | None = None
        self._adapters: dict[str, str] = {}

    async def start(self) -> None:
        if self._client is None:
            timeout = httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0))
            self._client = httpx.AsyncClient(base_url=self.base_url, timeout=timeout,
                                             transport=self._transport)

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            raise EngineUnavailable("the SGLang engine is not started")
        return self._client

    async def health(self) -> bool:
        try:
            response = await self.client.get("/health", timeout=_HEALTH_TIMEOUT_S)
        except (httpx.HTTPError, EngineUnavailable):
            return False
        return response.status_code == 200

    def generate(self, request: GenerateRequest) -> AsyncIterator[StepOutput]:
        limit = self.info.context_length - request.params.max_new_tokens
        if len(request.input_ids) > limit:
            raise ContextLengthExceeded(len(request.input_ids), request.params.max_new_tokens,
                                        self.info.context_length)
        return self._stream(request)

    async def _stream(self, request: GenerateRequest) -> AsyncIterator[StepOutput]:
        started = time.perf_counter()
        seen = 0
        first = True
        try:
            async with self.client.stream("POST", "/generate", json=generate_payload(request)) as response:
                await _raise_for_status(response, "generate")
                async for chunk in _sse_chunks(response):
                    ids, logprobs, finish = self._delta(chunk, seen)
                    seen += len(ids)
                    if not ids and finish is None:
                        continue
                    queue_ms = (time.perf_counter() - started) * 1000.0 if first else None
                    first = False
                    yield StepOutput(token_ids=ids, logprobs=logprobs, finish_reason=finish,
                                     queue_ms=queue_ms)
                    if finish is not None:
                        return
        except httpx.TimeoutException as exc:
            raise EngineTimeout(f"SGLang /generate timed out after {self.timeout_s}s") from exc
        except httpx.TransportError as exc:
            raise EngineUnavailable(f"SGLang is unreachable: {type(exc).__name__}") from exc
        raise EngineError("SGLang ended the stream without a finish reason")

    def _delta(self, chunk: dict[str, Any], seen: int) -> tuple[list[int], list[float], str | None]:
        if "error" in chunk:
            raise EngineError(f"SGLang reported an error: {chunk['error']}")
        meta = chunk.get("meta_info") or {}
        ids = [int(t) for t in chunk.get("output_ids") or []]
        logprob_rows = meta.get("output_token_logprobs") or []
        if not self.incremental_stream:
            ids, logprob_rows = ids[seen:], logprob_rows[seen:]
        if len(logprob_rows) != len(ids):
            raise EngineError(f"SGLang sent {len(ids)} ids but {len(logprob_rows)} logprobs")
        # each row is [logprob, token_id, text_or_null]; the ids must agree with output_ids
        logprobs = [float(row[0]) for row in logprob_rows]
        if any(int(row[1]) != tid for row, tid in zip(logprob_rows, ids, strict=True)):
            raise EngineError("SGLang logprob token ids disagree with output_ids")
        return ids, logprobs, _finish_reason(meta)

    async def load_adapter(self, name: str, path: str) -> None:
        if name in self._adapters:
            raise AdapterError(f"adapter {name!r} is already loaded; versions need new names")
        body = {"lora_name": name, "lora_path": path, "pinned": False}
        await self._adapter_call("/load_lora_adapter", body)
        self._adapters[name] = path

    async def unload_adapter(self, name: str) -> None:
        await self._adapter_call("/unload_lora_adapter", {"lora_name": name})
        self._adapters.pop(name, None)

    def loaded_adapters(self) -> set[str]:
        return set(self._adapters)

    async def _adapter_call(self, path: str, body: dict[str, Any]) -> None:
        try:
            response = await self.client.post(path, json=body)
        except httpx.TimeoutException as exc:
            raise EngineTimeout(f"SGLang {path} timed out") from exc
        except httpx.TransportError as exc:
            raise EngineUnavailable(f"SGLang is unreachable: {type(exc).__name__}") from exc
        if response.status_code >= 500:
            raise EngineUnavailable(f"SGLang {path} answered {response.status_code}")
        try:
            result = response.json()
        except ValueError:
            result = {}
        # http_server.py answers 400 with LoRAUpdateOutput {"success": false, "error_message": ...}
        if response.status_code != 200 or (isinstance(result, dict) and result.get("success") is False):
            message = result.get("error_message") if isinstance(result, dict) else None
            raise AdapterError(f"SGLang {path} failed ({response.status_code}): {message}")


async def _raise_for_status(response: httpx.Response, what: str) -> None:
    if response.status_code < 400:
        return
    body = (await response.aread())[:500].decode(errors="replace")
    if response.status_code >= 500 or response.status_code == 429:
        raise EngineUnavailable(f"SGLang {what} answered {response.status_code}: {body}")
    raise EngineError(f"SGLang {what} rejected the request ({response.status_code}): {body}")


async def _sse_chunks(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of an SSE stream of `data: {...}` lines, up to `data: [DONE]`."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            return
        try:
            yield json.loads(data)
        except json.JSONDecodeError as exc:
            raise EngineError("SGLang sent a malformed stream chunk") from exc
