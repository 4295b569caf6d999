"""The null engine: fixed reply tokens at once, to measure the proxy's own overhead and test routes fast."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from proxy.engines.base import (
    AdapterError,
    ContextLengthExceeded,
    EngineInfo,
    GenerateRequest,
    StepOutput,
)

NULL_LOGPROB = -0.5


class NullEngine:
    """Replies `reply_ids` (cut at `max_new_tokens`), one token per step, each with logprob -0.5."""

    def __init__(self, reply_ids: list[int], *, context_length: int = 8192,
                 eos_id: int | None = None) -> None:
        self.reply_ids = list(reply_ids)
        self.eos_id = eos_id
        self.info = EngineInfo(name="null", context_length=context_length,
                               eos_token_ids=[eos_id] if eos_id is not None else [])
        self._adapters: dict[str, str] = {}
        self._running = False

    async def start(self) -> None:
        self._running = True

    async def stop(self) -> None:
        self._running = False

    async def health(self) -> bool:
        return self._running

    def generate(self, request: GenerateRequest) -> AsyncIterator[StepOutput]:
        params = request.params
        if len(request.input_ids) > self.info.context_length - params.max_new_tokens:
            raise ContextLengthExceeded(len(request.input_ids), params.max_new_tokens,
                                        self.info.context_length)
        if request.adapter is not None and request.adapter not in self._adapters:
            raise AdapterError(f"adapter {request.adapter!r} is not loaded")
        return self._stream(request)

    async def _stream(self, request: GenerateRequest) -> AsyncIterator[StepOutput]:
        started = time.perf_counter()
        ids = self.reply_ids + ([self.eos_id] if self.eos_id is not None else [])
        stops = set(request.params.stop_token_ids) | set(self.info.eos_token_ids)
        limit = request.params.max_new_tokens
        if not ids[:limit]:
            yield StepOutput(token_ids=[], logprobs=[], finish_reason="stop", queue_ms=0.0)
            return
        for i, token in enumerate(ids[:limit]):
            last = i == len(ids) - 1 or i == limit - 1 or token in stops
            finish = None
            if last:
                finish = "stop" if token in stops or i == len(ids) - 1 else "length"
            yield StepOutput(token_ids=[token], logprobs=[NULL_LOGPROB], finish_reason=finish,
                             queue_ms=(time.perf_counter() - started) * 1000.0 if i == 0 else None)
            if finish is not None:
                return

    async def load_adapter(self, name: str, path: str) -> None:
        if name in self._adapters:
            raise AdapterError(f"adapter {name!r} is already loaded")
        self._adapters[name] = path

    async def unload_adapter(self, name: str) -> None:
        if self._adapters.pop(name, None) is None:
            raise AdapterError(f"adapter {name!r} is not loaded")

    def loaded_adapters(self) -> set[str]:
        return set(self._adapters)
