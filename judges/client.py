"""A blocking client for any OpenAI-compatible chat endpoint, used to ask the judge for votes.

Votes run concurrently on a thread pool over one shared `httpx.Client` (thread-safe), so a Celery
worker process builds one client and reuses its connections for every task.

Each vote streams (`stream: true`): the timeout is the longest wait for the next token, and a
deadline bounds the whole vote. A judge sharing two loaded cores with the policy writes 256 tokens
slowly but steadily; timing out the whole answer at 120 s cut such votes off, retried them from the
start, and never finished. A judge that stops writing still times out.

Exceptions:

    JudgeError              the judge endpoint failed
    ├── JudgeUnavailable    unreachable, 429 or 5xx: retry later
    ├── JudgeTimeout        no answer within the timeout: retry later
    └── JudgeBadResponse    4xx other than 429, or a body that is not a chat completion
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from core.settings import Settings

INTERNAL_HEADER = {"X-Turn-Type": "internal"}  # learnproxy's own proxy does not log judge calls


class JudgeError(RuntimeError):
    """The judge endpoint failed. The message is for logs."""


class JudgeUnavailable(JudgeError):
    pass


class JudgeTimeout(JudgeError):
    pass


class JudgeBadResponse(JudgeError):
    pass


RETRYABLE = (JudgeUnavailable, JudgeTimeout)


@dataclass(frozen=True)
class Completion:
    """One judge answer: its text, the model that produced it and the wall time it took."""

    text: str
    model: str
    latency_ms: float


class JudgeClient:
    """Chat completions against `base_url` (ending in `/v1`) with `model`."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        deadline_s: float = 270.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = dict(INTERNAL_HEADER)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.model = model
        self.timeout_s, self.deadline_s = timeout_s, deadline_s
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            transport=transport,
        )

    @classmethod
    def from_settings(
        cls, settings: Settings, *, transport: httpx.BaseTransport | None = None
    ) -> JudgeClient:
        return cls(
            settings.judge_base_url,
            settings.judge_model_name,
            api_key=settings.judge_api_key,
            timeout_s=settings.judge_timeout_s,
            deadline_s=settings.judge_deadline_s,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def complete(self, messages: list[dict[str, Any]], *, temperature: float, max_tokens: int,
                 seed: int | None = None) -> Completion:
        """One chat completion, streamed; raises a `JudgeError` subclass on any failure."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": temperature,
                                "max_tokens": max_tokens, "stream": True}
        if seed is not None:
            body["seed"] = seed
        start = time.perf_counter()
        try:
            with self._http.stream("POST", "chat/completions", json=body) as response:
                if response.status_code == 429 or response.status_code >= 500:
                    raise JudgeUnavailable(f"judge answered {response.status_code}: {_head(response)}")
                if response.status_code >= 400:
                    raise JudgeBadResponse(f"judge answered {response.status_code}: {_head(response)}")
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    response.read()  # a server that ignores `stream` answers one JSON completion
                    text = _content(response)
                else:
                    text = self._read_stream(response, start + self.deadline_s)
        except httpx.TimeoutException as exc:
            raise JudgeTimeout(f"judge wrote nothing for {self.timeout_s:.0f} s: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise JudgeUnavailable(f"judge unreachable: {exc!r}") from exc
        latency_ms = (time.perf_counter() - start) * 1000.0
        return Completion(text=text, model=self.model, latency_ms=latency_ms)

    def _read_stream(self, response: httpx.Response, deadline: float) -> str:
        """The content of an SSE chat completion stream, until `[DONE]` or the stream's end."""
        parts: list[str] = []
        for line in response.iter_lines():
            if time.perf_counter() > deadline:
                raise JudgeTimeout(f"judge did not finish within {self.deadline_s:.0f} s")
            if not line.startswith("data:"):
                continue
            data = line[len("data:"):].strip()
            if data == "[DONE]":
                break
            try:
                chunk = json.loads(data)
            except ValueError as exc:
                raise JudgeBadResponse(f"not a stream chunk: {data[:200]}") from exc
            if isinstance(chunk, dict) and "error" in chunk:  # an error event in the stream
                raise JudgeUnavailable(f"judge failed mid-answer: {json.dumps(chunk['error'])[:200]}")
            try:
                for choice in chunk["choices"]:
                    parts.append((choice.get("delta") or {}).get("content") or "")
            except (KeyError, TypeError, AttributeError) as exc:
                raise JudgeBadResponse(f"not a chat completion chunk: {data[:200]}") from exc
        return "".join(parts)

    def complete_many(
        self, messages: list[dict[str, Any]], n: int, *, temperature: float, max_tokens: int,
        seeds: list[int] | None = None,
    ) -> list[Completion]:
        """`n` independent samples of the same prompt, concurrently (sample i with `seeds[i]` if given);
        the first failure is raised."""
        if seeds is not None and len(seeds) != n:
            raise ValueError(f"{len(seeds)} seeds for {n} samples")
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="judge-vote") as pool:
            futures = [
                pool.submit(self.complete, messages, temperature=temperature, max_tokens=max_tokens,
                            seed=None if seeds is None else seeds[i])
                for i in range(n)
            ]
            return [f.result() for f in futures]


def _content(response: httpx.Response) -> str:
    try:
        payload = response.json()
        content = payload["choices"][0]["message"].get("content")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise JudgeBadResponse(f"not a chat completion: {response.text[:200]}") from exc
    if isinstance(content, list):  # some servers return content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _head(response: httpx.Response) -> str:
    return response.read().decode("utf-8", "replace")[:200]
