"""Builders of OpenClaw-shaped chat requests, as measured from `openclaw@2026.9.6` (see REFERENCE.md).

OpenClaw resends the whole history each turn, then appends a `user` message with list content
(`<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>...`) that is rebuilt every request and never kept. It echoes
a tool-calling reply as `content: null` plus `tool_calls`, may rewrite call ids (it drops the
underscore), and sends tool results with `tool_call_id` and no `name`. `OpenClawAgent` plays that
client; `turn_record` builds the `TurnRecord` the chat route would hand over for a reply.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime
from typing import Any

from proxy.records import Assignment, TurnRecord

CONTEXT_MARK = "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>"
CONTEXT_END = "<<<END_OPENCLAW_INTERNAL_CONTEXT>>>"
TOOL_NAMES = [
    "read", "write", "edit", "exec", "process", "browser",
    "web_search", "web_fetch", "memory_search", "memory_get", "sessions_send", "image",
]  # fmt: skip
_WORDS = [
    "agent",
    "workspace",
    "file",
    "tool",
    "call",
    "result",
    "user",
    "assistant",
    "memory",
    "session",
    "browser",
    "shell",
    "command",
    "safety",
    "policy",
    "output",
    "format",
    "markdown",
    "reply",
    "concise",
    "careful",
    "verify",
    "path",
    "project",
    "skill",
]


def _prose(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 16))).capitalize() + ". "
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:chars]


def system_prompt(chars: int = 47_000, seed: int = 0) -> str:
    """A deterministic system prompt of `chars` characters (OpenClaw's is about 47,000)."""
    rng = random.Random(seed)
    header = "You are a personal assistant running inside OpenClaw.\n\n## Tooling\n"
    return header + _prose(rng, chars - len(header))


def tools(n: int = 12, total_bytes: int = 10_000, seed: int = 0) -> list[dict[str, Any]]:
    """`n` function tools whose JSON adds up to about `total_bytes` (OpenClaw: 12 tools, ~10 KB)."""
    rng = random.Random(seed)
    per_tool = total_bytes // n
    out = []
    for i in range(n):
        name = TOOL_NAMES[i % len(TOOL_NAMES)] + ("" if i < len(TOOL_NAMES) else f"_{i}")
        tool = {
            "type": "function",
            "function": {
                "name": name,
                "description": "",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "Target path."},
                        "command": {"type": "string", "description": "What to run or fetch."},
                    },
                    "required": ["path"],
                },
            },
        }
        room = per_tool - len(json.dumps(tool))
        tool["function"]["description"] = _prose(rng, max(room, 40))  # type: ignore[index]
        out.append(tool)
    return out


def context_block(step: int) -> dict[str, Any]:
    """The trailing internal-context message, different on every request."""
    text = (
        f"{CONTEXT_MARK}\nCurrent time: 2026-09-06T12:{step % 60:02d}:00Z\nRequest: {uuid.uuid4().hex}\n"
        f"Runtime: agent=main channel=cli step={step}\n{CONTEXT_END}"
    )
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def tool_call(name: str, arguments: dict[str, Any], call_id: str | None = None) -> dict[str, Any]:
    """One OpenAI tool call as the proxy returns it."""
    return {
        "id": call_id or f"call_{uuid.uuid4().hex[:12]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def rewrite_call_id(call_id: str) -> str:
    """What OpenClaw did to call ids on the way back: it dropped the underscore."""
    return call_id.replace("_", "")


class OpenClawAgent:
    """One OpenClaw conversation: the history it keeps and the requests it sends."""

    def __init__(self, task: str, *, system: str | None = None, rewrite_ids: bool = True) -> None:
        self.system = system if system is not None else system_prompt(2_000)
        self.history: list[dict[str, Any]] = [{"role": "user", "content": task}]
        self.rewrite_ids = rewrite_ids
        self.steps = 0
        self._pending_calls: list[dict[str, Any]] = []

    def request(self) -> list[dict[str, Any]]:
        """The messages of the next request: system, full history, a freshly rebuilt context block."""
        self.steps += 1
        return [{"role": "system", "content": self.system}, *self.history, context_block(self.steps)]

    def receive(self, text: str = "", calls: list[dict[str, Any]] | None = None) -> None:
        """Keep the proxy's reply in history the way OpenClaw echoes it."""
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            echoed = []
            for call in calls:
                call_id = rewrite_call_id(call["id"]) if self.rewrite_ids else call["id"]
                echoed.append({**call, "id": call_id})
            message["tool_calls"] = echoed
            self._pending_calls = echoed
        self.history.append(message)

    def tool_results(self, contents: list[str], *, order: list[int] | None = None) -> list[dict[str, Any]]:
        """Answer the pending calls (optionally out of order): `tool_call_id`, no `name`."""
        order = order if order is not None else list(range(len(contents)))
        added = [
            {"role": "tool", "tool_call_id": self._pending_calls[i]["id"], "content": contents[i]}
            for i in order
        ]
        self.history.extend(added)
        self._pending_calls = []
        return added

    def user(self, text: str) -> None:
        self.history.append({"role": "user", "content": text})


def turn_record(
    assignment: Assignment,
    messages: list[dict[str, Any]],
    *,
    text: str = "",
    calls: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
    prompt_token_ids: list[int] | None = None,
    error: str | None = None,
    close_session: bool = False,
) -> TurnRecord:
    """The record the chat route hands over once the reply has been streamed."""
    response_ids = list(range(100, 100 + max(1, len(text) // 4)))
    return TurnRecord(
        session_id=assignment.session_id,
        turn_index=assignment.turn_index,
        turn_type=assignment.turn_type,
        session_source=assignment.source,
        request_id=f"chatcmpl-{uuid.uuid4().hex[:16]}",
        model="learnproxy",
        adapter_version_id=None,
        messages=messages,
        tools=tools,
        params={"stream": True, "max_completion_tokens": 4096, "tool_choice": "auto"},
        response_text=text,
        tool_calls=calls,
        finish_reason="tool_calls" if calls else "stop",
        prompt_token_ids=prompt_token_ids if prompt_token_ids is not None else list(range(1, 40)),
        response_token_ids=response_ids,
        response_logprobs=[-0.5] * len(response_ids),
        queue_ms=1.0,
        ttft_ms=5.0,
        total_ms=20.0,
        created_at=datetime.now(UTC),
        error=error,
        close_session=close_session,
    )
