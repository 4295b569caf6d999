"""Deterministic failure signals in a turn's next state, checked before any model is asked.

Only unambiguous failures fire: a JSON tool result with a non-empty `error` key (or `isError`), a
non-zero exit code, a Python traceback, an HTTP 4xx/5xx status line. Prose that merely mentions
errors ("no errors found", "error handling") must not fire, so every text pattern is anchored to
the shapes tools actually print.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from judges.prompts import message_text

_TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
_EXIT_TEXT = re.compile(
    r"(?:exit(?:ed)?(?: with)? (?:code|status)|exit_code|exitcode|returncode|return code)\s*[:=]?\s*(-?\d+)",
    re.IGNORECASE,
)
_HTTP_LINE = re.compile(r"\bHTTP/\d(?:\.\d)?\s+([45]\d\d)\b")
_HTTP_TEXT = re.compile(r"\b(?:HTTP|status(?: code)?|status_code)\s*[:=]?\s*([45]\d\d)\b", re.IGNORECASE)
_HTTP_REASON = re.compile(
    r"\b([45]\d\d)\s+(Bad Request|Unauthorized|Forbidden|Not Found|Method Not Allowed|Conflict|"
    r"Unprocessable Entity|Too Many Requests|Internal Server Error|Bad Gateway|Service Unavailable|"
    r"Gateway Timeout)\b"
)
_EXIT_KEYS = ("exit_code", "exitCode", "returncode", "return_code", "exit_status", "status_code_exit")
_STATUS_KEYS = ("status_code", "statusCode", "http_status", "status")


@dataclass(frozen=True)
class Signal:
    score: int
    reason: str


def detect(next_state: list[dict[str, Any]]) -> Signal | None:
    """The first failure signal in the tool results (and a traceback pasted by the user), or None."""
    for message in next_state:
        text = message_text(message)
        if message.get("role") == "tool":
            reason = _json_failure(text) or _text_failure(text)
        elif message.get("role") == "user":
            reason = "the user pasted a traceback" if _TRACEBACK.search(text) else None
        else:
            reason = None
        if reason:
            return Signal(-1, reason)
    return None


def _json_failure(text: str) -> str | None:
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        payload = json.loads(stripped)
    except ValueError:
        return None
    if isinstance(payload, list):
        payload = next((p for p in payload if isinstance(p, dict)), None)
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if error not in (None, "", False, [], {}):
        return f"tool result has an error: {_short(error)}"
    if payload.get("isError") is True or payload.get("success") is False or payload.get("ok") is False:
        return f"tool result reports failure: {_short(payload)}"
    for key in _EXIT_KEYS:
        value = payload.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value != 0:
            return f"tool exited with {key}={value}"
    for key in _STATUS_KEYS:
        value = payload.get(key)
        if isinstance(value, int) and 400 <= value <= 599:
            return f"HTTP status {value}"
    return None


def _text_failure(text: str) -> str | None:
    if _TRACEBACK.search(text):
        return "traceback in tool output"
    for match in _EXIT_TEXT.finditer(text):
        if int(match.group(1)) != 0:
            return f"non-zero exit code {match.group(1)}"
    for pattern in (_HTTP_LINE, _HTTP_TEXT, _HTTP_REASON):
        status = pattern.search(text)
        if status:
            return f"HTTP status {status.group(1)}"
    return None


def _short(value: object, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "..."
