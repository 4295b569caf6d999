"""Prompt templates beside the judges that use them, and the judge's view of a turn as bounded text.

Templates are plain text with `$var` placeholders (`string.Template`). A template's version is a
hash of its text, so every stored vote names exactly the wording that produced it.
"""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OPENCLAW_CONTEXT_MARK = "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>"


class TemplateError(ValueError):
    """A template names a variable it was not given, or was given one it does not use."""


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    text: str

    @property
    def version(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:12]

    @property
    def variables(self) -> set[str]:
        found = set()
        for match in string.Template.pattern.finditer(self.text):
            name = match.group("named") or match.group("braced")
            if name:
                found.add(name)
        return found

    def render(self, **values: str) -> str:
        missing = self.variables - values.keys()
        unused = values.keys() - self.variables
        if missing or unused:
            raise TemplateError(f"template {self.name}: missing {sorted(missing)}, unused {sorted(unused)}")
        return string.Template(self.text).substitute(values)


@lru_cache(maxsize=8)
def load_template(name: str) -> PromptTemplate:
    """`judges/<name>_prompt.txt`."""
    return PromptTemplate(name=name, text=(HERE / f"{name}_prompt.txt").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class JudgeInput:
    """What every judge stage sees of one turn."""

    request: str  # the user request the turn answered
    output: str  # assistant text and tool calls
    next_state: list[dict[str, Any]]  # tool results in order, then the user's reply

    @property
    def user_reply(self) -> str | None:
        replies = [message_text(m) for m in self.next_state if m.get("role") == "user"]
        replies = [r for r in replies if r.strip() and OPENCLAW_CONTEXT_MARK not in r]
        return "\n".join(replies) if replies else None

    def render_next_state(self) -> str:
        parts = []
        for m in self.next_state:
            role = m.get("role", "?")
            if role == "user" and OPENCLAW_CONTEXT_MARK in message_text(m):
                continue  # rebuilt agent context, not feedback
            label = "tool result" if role == "tool" else role
            name = m.get("name") or m.get("tool_call_id")
            parts.append(f"[{label}{' ' + str(name) if name else ''}]\n{message_text(m)}")
        return "\n\n".join(parts)


def message_text(message: dict[str, Any]) -> str:
    """A message's content as text: string content, or the text parts of list content."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return json.dumps(content, ensure_ascii=False)


def render_output(text: str, tool_calls: list[dict[str, Any]] | None) -> str:
    parts = [text.strip()] if text and text.strip() else []
    for call in tool_calls or []:
        fn = call.get("function") or {}
        parts.append(f"[tool call] {fn.get('name', '?')}({fn.get('arguments', '')})")
    return "\n".join(parts) if parts else "(empty response)"


def last_request(messages: list[dict[str, Any]]) -> str:
    """The last real user message (the rebuilt OpenClaw context block is skipped)."""
    for m in reversed(messages):
        text = message_text(m)
        if m.get("role") == "user" and text.strip() and OPENCLAW_CONTEXT_MARK not in text:
            return text
    return ""


def cut(text: str, limit: int) -> str:
    """At most about `limit` characters, keeping the head and the tail (errors often sit at the end)."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = max(limit - head - 40, 0)
    return f"{text[:head]}\n...[{len(text) - head - tail} characters cut]...\n{text[len(text) - tail:]}"


def prompt_values(inp: JudgeInput, max_chars: int) -> dict[str, str]:
    return {
        "request": cut(inp.request or "(no user request)", max_chars),
        "response": cut(inp.output, max_chars),
        "next_state": cut(inp.render_next_state() or "(nothing)", max_chars),
    }
