"""The chat completions service: render, lease an adapter, generate, detokenize, parse, log.

A request becomes a `ChatRun`. `ChatService.start` validates what needs the model (context length),
assigns the session and waits for the first engine output, so that failures before any token
(unknown model, engine down) still get a proper status code. The run is then either collected into
one response or streamed as SSE as tokens arrive. Either way, exactly one `TurnRecord` is handed to
the session tracker when the run ends, failed and abandoned runs included (internal turns: none).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from core.settings import Settings
from proxy import protocol
from proxy.engines.base import (
    ContextLengthExceeded,
    Engine,
    EngineTimeout,
    GenerateRequest,
    SamplingParams,
    StepOutput,
)
from proxy.errors import InvalidRequest, ModelNotFound, ProxyError, to_proxy_error
from proxy.protocol import ChatCompletionRequest
from proxy.records import Assignment, SessionHints, TurnRecord
from proxy.render import RenderedPrompt, render_prompt
from proxy.toolparse import StreamingToolParser, ToolCallDelta

log = logging.getLogger(__name__)

TURN_TYPES = ("main", "side", "internal")
_DETOK_CONTEXT = 6  # prompt tokens decoded with the reply, so the first word keeps its leading space
_KNOWN_PARAMS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "n")


class Lease(Protocol):
    adapter: str | None
    version_id: int | None


class Adapters(Protocol):
    def model_names(self) -> list[str]: ...

    def lease(self, model: str) -> Any: ...


class Tracker(Protocol):
    def assign(self, hints: SessionHints, messages: list[dict[str, Any]]) -> Assignment: ...

    def complete(self, record: TurnRecord) -> None: ...


def hints_from(headers: Mapping[str, str], req: ChatCompletionRequest) -> SessionHints:
    """The session evidence on one request (see `proxy.records.SessionHints`)."""
    turn_type = headers.get("x-turn-type", "main").strip().lower() or "main"
    if turn_type not in TURN_TYPES:
        raise InvalidRequest("X-Turn-Type must be one of main, side or internal.", param="X-Turn-Type")
    affinity = headers.get("session_id") or headers.get("x-session-affinity") or req.prompt_cache_key
    return SessionHints(
        header_session_id=headers.get("x-session-id") or None,
        body_session_id=req.session_id or req.user or None,
        affinity_id=affinity or None,
        turn_type=turn_type,
        done=headers.get("x-session-done", "").strip().lower() == "true",
    )


class Detokenizer:
    """Incremental decoding that never emits half of a multi-byte character."""

    def __init__(self, tokenizer: Any, prompt_tail: list[int]) -> None:
        self._tok = tokenizer
        self._ids = list(prompt_tail)
        self._prefix = 0
        self._read = len(self._ids)

    def step(self, new_ids: list[int]) -> str:
        self._ids.extend(new_ids)
        before = self._tok.decode(self._ids[self._prefix : self._read], skip_special_tokens=True)
        after = self._tok.decode(self._ids[self._prefix :], skip_special_tokens=True)
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""  # an incomplete UTF-8 sequence: wait for the next token
        self._prefix, self._read = self._read, len(self._ids)
        return after[len(before) :]


class StopMatcher:
    """Cuts the text at the first stop string, holding back what may be the start of one."""

    def __init__(self, stops: list[str]) -> None:
        self._stops = stops
        self._held = ""

    def feed(self, text: str) -> tuple[str, bool]:
        if not self._stops:
            return text, False
        buf = self._held + text
        hits = [i for i in (buf.find(s) for s in self._stops) if i >= 0]
        if hits:
            self._held = ""
            return buf[: min(hits)], True
        keep = max((_overlap(buf, s) for s in self._stops), default=0)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


def _overlap(text: str, stop: str) -> int:
    for n in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


@dataclass
class ChatService:
    """Everything a chat request needs, built once in the app's lifespan."""

    settings: Settings
    tokenizer: Any
    engine: Engine
    adapters: Adapters
    tracker: Tracker

    def __post_init__(self) -> None:
        self._render_lock = threading.Lock()  # one tokenizer, used from worker threads
        eos = list(self.engine.info.eos_token_ids)
        if getattr(self.tokenizer, "eos_token_id", None) is not None:
            eos.append(int(self.tokenizer.eos_token_id))
        self.stop_token_ids = tuple(dict.fromkeys(eos))

    def _render(self, req: ChatCompletionRequest, messages: list[dict[str, Any]]) -> RenderedPrompt:
        with self._render_lock:
            return render_prompt(
                self.tokenizer,
                messages,
                req.offered_tools(),
                required=req.tool_choice == "required",
                forced=req.forced_tool(),
            )

    def _max_new_tokens(self, req: ChatCompletionRequest, prompt_len: int) -> int:
        ctx = self.engine.info.context_length
        asked = req.max_new_tokens
        if asked is not None and prompt_len + asked > ctx:
            raise ContextLengthExceeded(prompt_len, asked, ctx)
        room = ctx - prompt_len
        if room <= 0:
            raise ContextLengthExceeded(prompt_len, asked or 1, ctx)
        return asked if asked is not None else min(self.settings.default_max_tokens, room)

    async def start(
        self, req: ChatCompletionRequest, payload: dict[str, Any], hints: SessionHints, client: dict[str, Any]
    ) -> ChatRun:
        """A started run whose first engine output has arrived; raises `ProxyError` before that."""
        received = time.perf_counter()
        if req.model not in self.adapters.model_names():
            raise ModelNotFound(req.model)
        messages: list[dict[str, Any]] = payload["messages"]
        prompt = await asyncio.to_thread(self._render, req, messages)
        max_new = self._max_new_tokens(req, len(prompt.input_ids))
        stack = ExitStack()
        try:
            lease = stack.enter_context(self.adapters.lease(req.model))
        except KeyError:
            raise ModelNotFound(req.model) from None
        assignment = None if hints.turn_type == "internal" else self.tracker.assign(hints, messages)
        run = ChatRun(self, req, payload, hints, client, prompt, max_new, assignment, lease, stack, received)
        await run.prime()
        return run


class ChatRun:
    """One request's generation, from the first engine output to the logged turn."""

    def __init__(
        self,
        svc: ChatService,
        req: ChatCompletionRequest,
        payload: dict[str, Any],
        hints: SessionHints,
        client: dict[str, Any],
        prompt: RenderedPrompt,
        max_new_tokens: int,
        assignment: Assignment | None,
        lease: Lease,
        stack: ExitStack,
        received: float,
    ) -> None:
        self.svc, self.req, self.payload, self.hints, self.client = svc, req, payload, hints, client
        self.prompt, self.assignment, self.lease, self._stack = prompt, assignment, lease, stack
        self.id = protocol.completion_id()
        self.created = protocol.now()
        self._received = received
        self._params = SamplingParams(
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            max_new_tokens=max_new_tokens,
            seed=req.seed,
            stop_token_ids=svc.stop_token_ids,
        )
        self._detok = Detokenizer(svc.tokenizer, prompt.input_ids[-_DETOK_CONTEXT:])
        self._stops = StopMatcher(req.stop_strings)
        self._tools = bool(req.offered_tools())
        self._parser = StreamingToolParser(parallel=req.parallel_tool_calls is not False)
        self._iter: AsyncIterator[StepOutput] | None = None
        self._first: StepOutput | None = None
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.content: list[str] = []
        self.finish_reason: str | None = None
        self.queue_ms: float | None = None
        self.ttft_ms: float | None = None
        self._done = False

    # --- engine --------------------------------------------------------------------------------

    async def prime(self) -> None:
        """Start generation and wait for the first output, so early failures get a status code."""
        request = GenerateRequest(self.id, self.prompt.input_ids, self._params, self.lease.adapter)
        try:
            self._iter = self.svc.engine.generate(request)
            self._first = await self._next()
        except BaseException as exc:
            await self._end(error=exc)
            raise to_proxy_error(exc) from None if isinstance(exc, Exception) else exc

    async def _next(self) -> StepOutput | None:
        assert self._iter is not None
        try:
            async with asyncio.timeout(self.svc.settings.engine_timeout_s):
                return await anext(self._iter)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            raise EngineTimeout(f"no engine output in {self.svc.settings.engine_timeout_s}s") from None

    async def _close_engine(self) -> None:
        closer = getattr(self._iter, "aclose", None)
        self._iter = None
        if closer is not None:
            try:
                await closer()  # aborts the request on the engine (client gone or stop string hit)
            except Exception:
                log.warning("closing the engine stream of %s failed", self.id, exc_info=True)

    def _take(self, step: StepOutput) -> None:
        if not self.ids and step.token_ids:
            self.ttft_ms = (time.perf_counter() - self._received) * 1000
        if self.queue_ms is None and step.queue_ms is not None:
            self.queue_ms = step.queue_ms
        self.ids.extend(step.token_ids)
        self.logprobs.extend(step.logprobs)

    # --- text ------------------------------------------------------------------------------------

    def _parse(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        if not self._tools:
            return text, []
        return self._parser.feed(text)

    async def pieces(self) -> AsyncIterator[tuple[str, list[ToolCallDelta]]]:
        """Content and tool-call deltas as tokens arrive; sets `finish_reason` at the end."""
        step, stopped = self._first, False
        while step is not None:
            self._take(step)
            text, stopped = self._stops.feed(self._detok.step(step.token_ids))
            if text:
                yield self._parse(text)
            if stopped or step.finish_reason:
                break
            step = await self._next()
        await self._close_engine()
        reason = "stop" if stopped or step is None else step.finish_reason
        tail = "" if stopped else self._stops.flush()
        head, deltas = self._parse(tail) if tail else ("", [])
        more, last = self._parser.finish() if self._tools else ("", [])
        if head or more or deltas or last:
            yield head + more, deltas + last
        self.finish_reason = "length" if reason == "length" else "stop"
        if self._parser.calls and self.finish_reason == "stop":
            self.finish_reason = "tool_calls"

    def _content(self) -> str | None:
        text = "".join(self.content)
        return None if self._parser.calls and not text.strip() else text

    def usage(self) -> dict[str, int]:
        return protocol.usage(len(self.prompt.input_ids), len(self.ids))

    # --- delivery -------------------------------------------------------------------------------

    async def collect(self) -> dict[str, Any]:
        """The whole reply as one `chat.completion`."""
        error: BaseException | None = None
        try:
            async for text, _ in self.pieces():
                self.content.append(text)
        except BaseException as exc:
            error = exc
            raise to_proxy_error(exc) from None if isinstance(exc, Exception) else exc
        finally:
            await self._end(error=error)
        return protocol.completion(
            id=self.id,
            model=self.req.model,
            created=self.created,
            content=self._content(),
            tool_calls=self._parser.calls or None,
            finish_reason=self.finish_reason or "stop",
            usage=self.usage(),
        )

    def _chunk(self, delta: dict[str, Any] | None, finish: str | None = None) -> str:
        return _sse(
            protocol.chunk(
                id=self.id,
                model=self.req.model,
                created=self.created,
                delta=delta,
                finish_reason=finish,
                usage=self.usage() if delta is None else None,
                include_usage=self.req.include_usage,
            )
        )

    async def sse(self) -> AsyncIterator[str]:
        """The reply as OpenAI SSE chunks; an error mid-stream becomes an error event, then [DONE]."""
        error: BaseException | None = None
        try:
            yield self._chunk({"role": "assistant", "content": ""})
            async for text, deltas in self.pieces():
                if text:
                    self.content.append(text)
                    yield self._chunk({"content": text})
                if deltas:
                    yield self._chunk({"tool_calls": [d.as_openai() for d in deltas]})
            yield self._chunk({}, self.finish_reason)
            if self.req.include_usage:
                yield self._chunk(None)
        except Exception as exc:
            error = exc
            yield _sse(to_proxy_error(exc).body())
        except BaseException as exc:  # client gone: generator closed or task cancelled
            error = exc
            raise
        finally:
            await self._end(error=error)
        yield "data: [DONE]\n\n"

    # --- logging --------------------------------------------------------------------------------

    async def _end(self, *, error: BaseException | None) -> None:
        """Release the engine and the adapter lease and log the turn, exactly once."""
        if self._done:
            return
        self._done = True
        if self._iter is not None:
            await self._close_engine()
        self._stack.close()
        if self.assignment is not None:
            try:
                self.svc.tracker.complete(self._record(error))
            except Exception:
                log.exception("could not hand turn %s to the logger", self.id)

    def _record(self, error: BaseException | None) -> TurnRecord:
        a = self.assignment
        assert a is not None
        reason: str | None
        message: str | None
        if error is not None and not isinstance(error, Exception):
            reason, message = "abort", "client disconnected"
        elif error is not None:
            reason, message = "error", f"{type(error).__name__}: {error}"  # stored, never sent
        else:
            reason, message = self.finish_reason, None
        return TurnRecord(
            session_id=a.session_id,
            turn_index=a.turn_index,
            turn_type=a.turn_type,
            session_source=a.source,
            request_id=self.id,
            model=self.req.model,
            adapter_version_id=self.lease.version_id,
            messages=self.payload["messages"],
            tools=self.payload.get("tools"),
            params=self.params(),
            response_text="".join(self.content),
            tool_calls=self._parser.calls or None,
            finish_reason=reason,
            prompt_token_ids=list(self.prompt.input_ids),
            response_token_ids=list(self.ids),
            response_logprobs=list(self.logprobs),
            queue_ms=self.queue_ms,
            ttft_ms=self.ttft_ms,
            total_ms=(time.perf_counter() - self._received) * 1000,
            created_at=datetime.now(UTC),
            error=message,
            close_session=self.hints.done,
            client=self.client,
        )

    def params(self) -> dict[str, Any]:
        """What was asked and what was used; unknown OpenAI fields are recorded as ignored."""
        req = self.req
        out: dict[str, Any] = {k: getattr(req, k) for k in _KNOWN_PARAMS if getattr(req, k) is not None}
        out.update(
            stream=req.stream,
            include_usage=req.include_usage,
            max_new_tokens=self._params.max_new_tokens,
            tool_choice=req.tool_choice if isinstance(req.tool_choice, str | None) else req.forced_tool(),
            parallel_tool_calls=req.parallel_tool_calls,
            adapter=self.lease.adapter,
        )
        if req.model_extra:
            out["ignored"] = dict(req.model_extra)
        return out


__all__ = ["ChatRun", "ChatService", "Detokenizer", "ProxyError", "StopMatcher", "hints_from"]
