"""What the request path hands to the session tracker and the write-behind turn logger.

The chat route builds these; `proxy.sessions` and `proxy.turnlog` consume them. Keeping them here
lets both sides be written and tested apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class SessionHints:
    """Session evidence read off one request, strongest first."""

    header_session_id: str | None = None  # X-Session-Id
    body_session_id: str | None = None  # body session_id, else user
    affinity_id: str | None = None  # session_id / x-session-affinity headers, body prompt_cache_key
    turn_type: str = "main"  # main, side, or internal (never logged)
    done: bool = False  # X-Session-Done: true


@dataclass(frozen=True)
class Assignment:
    """Where a request belongs: its session and turn index."""

    session_id: str
    turn_index: int
    turn_type: str
    source: str  # header, body, affinity, inferred, new


@dataclass
class TurnRecord:
    """One finished (or failed) turn, exactly as served."""

    session_id: str
    turn_index: int
    turn_type: str
    session_source: str
    request_id: str
    model: str
    adapter_version_id: int | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    params: dict[str, Any]
    response_text: str
    tool_calls: list[dict[str, Any]] | None
    finish_reason: str | None
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    response_logprobs: list[float]
    queue_ms: float | None
    ttft_ms: float | None
    total_ms: float | None
    created_at: datetime
    error: str | None = None
    close_session: bool = False  # X-Session-Done: the session ends with this turn
    client: dict[str, Any] = field(default_factory=dict)


@dataclass
class NextStateRecord:
    """The messages that followed a turn: its tool results in order, then the user's reply."""

    session_id: str
    turn_index: int
    next_state: list[dict[str, Any]]
    at: datetime


@dataclass
class SessionClose:
    session_id: str
    reason: str  # done_header, idle
    at: datetime
