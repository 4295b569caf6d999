"""A blocking client for any OpenAI-compatible chat endpoint, used to ask the judge for votes.

Votes run concurrently on a thread pool over one shared `httpx.Client` (thread-safe), so a Celery
worker process builds one client and reuses its connections for every task.

Exceptions:

    JudgeError              the judge endpoint failed
    ├── JudgeUnavailable    unreachable, 429 or 5xx: retry later
    ├── JudgeTimeout        no answer within the timeout: retry later
    └── JudgeBadResponse    4xx other than 429, or a body that is not a chat completion
"""

from __future__ import annotations

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
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = dict(INTERNAL_HEADER)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.model = model
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
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def complete(self, messages: list[dict[str, Any]], *, temperature: float, max_tokens: int) -> Completion:
        """One chat completion; raises a `JudgeError` subclass on any failure."""
        body = {"model": self.model, "messages": messages, "temperature": temperature,
                "max_tokens": max_tokens, "stream": False}
        start = time.perf_counter()
        try:
            response = self._http.post("chat/completions", json=body)
        except httpx.TimeoutException as exc:
            raise JudgeTimeout(f"judge timed out: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise JudgeUnavailable(f"judge unreachable: {exc!r}") from exc
        latency_ms = (time.perf_counter() - start) * 1000.0
        if response.status_code == 429 or response.status_code >= 500:
            raise JudgeUnavailable(f"judge answered {response.status_code}: {response.text[:200]}")
        if response.status_code >= 400:
            raise JudgeBadResponse(f"judge answered {response.status_code}: {response.text[:200]}")
        return Completion(text=_content(response), model=self.model, latency_ms=latency_ms)

    def complete_many(
        self, messages: list[dict[str, Any]], n: int, *, temperature: float, max_tokens: int
    ) -> list[Completion]:
        """`n` independent samples of the same prompt, concurrently; the first failure is raised."""
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="judge-vote") as pool:
            futures = [
                pool.submit(self.complete, messages, temperature=temperature, max_tokens=max_tokens)
                for _ in range(n)
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
