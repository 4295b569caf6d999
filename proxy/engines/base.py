"""The engine interface: token ids in, sampled token ids and their logprobs out.

Exceptions:

    EngineError            the engine failed; the client gets 5xx
    ├── EngineUnavailable  not loaded, unreachable or overloaded: 503 with Retry-After
    └── EngineTimeout      no answer in time: 504
    ContextLengthExceeded  the prompt plus max tokens does not fit: 400 context_length_exceeded
    AdapterError           loading or unloading an adapter failed
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


class EngineError(RuntimeError):
    """The engine failed. The message is for logs, never for clients."""


class EngineUnavailable(EngineError):
    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class EngineTimeout(EngineError):
    pass


class AdapterError(EngineError):
    pass


class ContextLengthExceeded(ValueError):
    def __init__(self, prompt_tokens: int, max_new_tokens: int, context_length: int) -> None:
        super().__init__(
            f"This model's maximum context length is {context_length} tokens. However, you requested "
            f"{prompt_tokens + max_new_tokens} tokens ({prompt_tokens} in the messages, "
            f"{max_new_tokens} in the completion). Please reduce the length of the messages or completion."
        )
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.context_length = context_length


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class GenerateRequest:
    request_id: str
    input_ids: list[int]
    params: SamplingParams
    adapter: str | None = None  # engine adapter name; None serves the base model


@dataclass
class StepOutput:
    """Newly sampled tokens (one or more) with one logprob each; `finish_reason` on the last."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None = None  # "stop" (eos or stop token), "length", "abort"
    queue_ms: float | None = None  # set on the first output: time spent waiting for a batch slot


@dataclass
class EngineInfo:
    name: str
    context_length: int
    eos_token_ids: list[int] = field(default_factory=list)


@runtime_checkable
class Engine(Protocol):
    """What the proxy needs from a serving engine.

    `generate` streams as tokens are sampled. Closing the iterator early (client gone, stop string
    matched) aborts the request on the engine. Logprobs are those of the sampled token under the
    policy at temperature 1 (unscaled logits), which is what the learner's importance ratio needs.
    """

    info: EngineInfo

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def generate(self, request: GenerateRequest) -> AsyncIterator[StepOutput]: ...

    async def load_adapter(self, name: str, path: str) -> None: ...

    async def unload_adapter(self, name: str) -> None: ...

    def loaded_adapters(self) -> set[str]: ...

    async def health(self) -> bool: ...
