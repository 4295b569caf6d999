"""Sessions without client changes: which conversation a request continues, and what followed a turn.

A request names its session through X-Session-Id, the body's `session_id`/`user`, or OpenClaw's
opt-in affinity ids. Without any of these the session is inferred: a request continues a session
when it contains that session's last main reply and the messages before that reply are a prefix of
the request that produced it. The prefix rule (not "starts with the previous request") is what lets
OpenClaw match: it rebuilds a trailing internal-context `user` message on every request and drops it
from the history. Messages are compared normalized (text parts joined, `content: null` as empty,
tool call ids ignored because agents rewrite them), by hash, through an index keyed by the reply.

When a session's next main request arrives, everything after the awaited reply becomes that turn's
next state (tool results in call order, then the user's reply, never the rebuilt context block) and
is handed to the turn logger behind the turn's own record.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from core.blobs import canonical_json
from core.models import ChatSession, Turn, TurnStatus
from core.turns import view_of
from proxy.records import Assignment, NextStateRecord, SessionClose, SessionHints, TurnRecord
from proxy.turnlog import TurnLogger, aware

log = logging.getLogger(__name__)

INTERNAL_CONTEXT_MARK = "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>"
MAX_SESSION_ID = 128  # ChatSession.id column width
_RETIRED_KEPT = 10_000  # closed sessions whose next turn index we remember, newest first


# --- normalization -----------------------------------------------------------------------------


def content_text(content: Any) -> str:
    """The text of a message's content: a string, None, or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif isinstance(part, str):
                pieces.append(part)
            else:  # images and other parts still count, by value
                pieces.append(canonical_json(part).decode())
        return "".join(pieces)
    return canonical_json(content).decode()


def _canonical_arguments(arguments: Any) -> str:
    """Tool-call arguments compared as JSON values, since clients re-serialize them."""
    if isinstance(arguments, str):
        try:
            return canonical_json(json.loads(arguments)).decode()
        except ValueError:
            return arguments.strip()
    return canonical_json(arguments).decode()


def _call_signature(call: dict[str, Any]) -> list[str]:
    function = call.get("function") or {}
    return [str(function.get("name", "")), _canonical_arguments(function.get("arguments", ""))]


def normalize_message(message: dict[str, Any]) -> dict[str, Any]:
    """What must match for two messages to be the same turn of a conversation."""
    role = str(message.get("role", ""))
    out: dict[str, Any] = {"role": role, "content": content_text(message.get("content")).strip()}
    if role == "assistant":
        out["tool_calls"] = [_call_signature(c) for c in message.get("tool_calls") or []]
    # tool_call_id and name are left out on purpose: agents rewrite ids and drop names
    return out


def message_key(message: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(normalize_message(message))).hexdigest()


def reply_message(record: TurnRecord) -> dict[str, Any]:
    """The assistant message the client will send back for this turn."""
    message: dict[str, Any] = {"role": "assistant", "content": record.response_text or None}
    if record.tool_calls:
        message["tool_calls"] = record.tool_calls
    return message


def is_internal_context(message: dict[str, Any]) -> bool:
    """OpenClaw's rebuilt context block: sent every request, never kept, never feedback."""
    if message.get("role") != "user":
        return False
    return content_text(message.get("content")).lstrip().startswith(INTERNAL_CONTEXT_MARK)


def bounded_id(raw: str) -> str:
    """Client ids are kept as given unless too long for the column, then shortened by hash."""
    if len(raw) <= MAX_SESSION_ID:
        return raw
    return raw[:80] + "~" + hashlib.sha256(raw.encode()).hexdigest()[:40]


# --- next state --------------------------------------------------------------------------------


@dataclass
class _Anchor:
    """A session's latest main turn: what its request was and which reply the client will echo."""

    turn_index: int
    request_keys: list[str]
    reply_key: str
    call_ids: list[str]
    call_names: list[str]
    history_len: int  # request messages before the trailing rebuilt context block(s)
    answered: bool = False  # its next state was already submitted


def next_state_of(
    after: list[dict[str, Any]], anchor: _Anchor, echoed: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Tool results in call order (by id, else position), then the rest (the user's reply).

    `echoed` is the reply as the client sent it back: its call ids are the ones its tool messages
    use when the client rewrote ours.
    """
    kept = [m for m in after if not is_internal_context(m)]
    tool_msgs = [m for m in kept if m.get("role") == "tool"]
    slots = iter(_match_calls(tool_msgs, anchor.call_ids, _echoed_ids(echoed, anchor)))
    matched: dict[int, dict[str, Any]] = {}
    rest: list[dict[str, Any]] = []  # the user's reply, and tool messages answering no call of ours
    for message in kept:
        slot = next(slots) if message.get("role") == "tool" else None
        if slot is None:
            rest.append(dict(message))
            continue
        result = dict(message)
        result["tool_call_id"] = anchor.call_ids[slot]
        result.setdefault("name", anchor.call_names[slot])
        matched[slot] = result
    return [matched[i] for i in sorted(matched)] + rest


def _echoed_ids(echoed: dict[str, Any] | None, anchor: _Anchor) -> list[str]:
    ids = [str(c.get("id", "")) for c in (echoed or {}).get("tool_calls") or []]
    return ids if len(ids) == len(anchor.call_ids) else []


def _match_calls(tool_msgs: list[dict[str, Any]], ids: list[str], client_ids: list[str]) -> list[int | None]:
    """Each tool message's call: by id first (ours or the client's rewrite), then by position."""
    slots: list[int | None] = [None] * len(tool_msgs)
    taken: set[int] = set()
    for n, message in enumerate(tool_msgs):
        call_id = message.get("tool_call_id")
        for known in (client_ids, ids):
            if call_id in known and known.index(call_id) not in taken:
                slots[n] = known.index(call_id)
                taken.add(known.index(call_id))
                break
    for n in range(len(tool_msgs)):
        if slots[n] is not None:
            continue
        free = [i for i in range(len(ids)) if i not in taken]
        if not free:
            break
        slot = n if n in free else free[0]
        slots[n] = slot
        taken.add(slot)
    return slots


def anchor_of(record_messages: list[dict[str, Any]], reply: dict[str, Any], turn_index: int) -> _Anchor:
    calls = reply.get("tool_calls") or []
    history_len = len(record_messages)
    while history_len and is_internal_context(record_messages[history_len - 1]):
        history_len -= 1
    return _Anchor(
        turn_index=turn_index,
        request_keys=[message_key(m) for m in record_messages],
        reply_key=message_key(reply),
        call_ids=[str(c.get("id", "")) for c in calls],
        call_names=[str((c.get("function") or {}).get("name", "")) for c in calls],
        history_len=history_len,
    )


# --- the tracker -------------------------------------------------------------------------------


@dataclass
class _SessionState:
    id: str
    next_index: int
    last_seen: datetime
    anchor: _Anchor | None = None
    indexed: bool = False  # anchor.reply_key is in the reply index
    in_flight: int = 0
    closing: set[int] = field(default_factory=set)  # turns sent with X-Session-Done


class SessionTracker:
    """Assigns requests to sessions, emits next states, and closes done or idle sessions."""

    def __init__(
        self, session_factory: sessionmaker[Session], logger: TurnLogger, *, idle_timeout_s: float
    ) -> None:
        self._factory = session_factory
        self._logger = logger
        self._idle = timedelta(seconds=idle_timeout_s)
        self._lock = threading.Lock()
        self._sessions: dict[str, _SessionState] = {}
        self._by_reply: dict[str, set[str]] = {}  # reply key -> sessions awaiting that reply back
        self._retired: OrderedDict[str, int] = OrderedDict()  # closed session -> next turn index

    # --- start-up ----------------------------------------------------------------------------

    def load_open_sessions(self) -> None:
        """Rebuild the in-memory index from the DB, so a restarted proxy keeps matching."""
        with self._factory() as session:
            open_ids = select(ChatSession.id).where(ChatSession.closed_at.is_(None))
            rows = session.execute(
                select(ChatSession.id, ChatSession.last_seen_at, ChatSession.n_turns)
                .add_columns(func.max(Turn.turn_index))
                .outerjoin(Turn, Turn.session_id == ChatSession.id)
                .where(ChatSession.closed_at.is_(None))
                .group_by(ChatSession.id, ChatSession.last_seen_at, ChatSession.n_turns)
            ).all()
            awaiting = session.scalars(
                select(Turn)
                .where(Turn.session_id.in_(open_ids), Turn.status == TurnStatus.awaiting_next_state)
                .order_by(Turn.session_id, Turn.turn_index)
            ).all()
            latest = {t.session_id: t for t in awaiting}  # the last awaiting main turn per session
            anchors = {sid: self._anchor_from_db(session, t) for sid, t in latest.items()}
        with self._lock:
            for sid, last_seen, n_turns, max_index in rows:
                if sid in self._sessions:
                    continue
                next_index = max(n_turns, (max_index if max_index is not None else -1) + 1)
                state = _SessionState(id=sid, next_index=next_index, last_seen=aware(last_seen))
                self._sessions[sid] = state
                if sid in anchors:
                    self._set_anchor(state, anchors[sid])
        log.info("loaded %d open sessions (%d awaiting a next state)", len(rows), len(anchors))

    @staticmethod
    def _anchor_from_db(session: Session, turn: Turn) -> _Anchor:
        view = view_of(session, turn, with_tokens=False)
        reply: dict[str, Any] = {"role": "assistant", "content": turn.response_text or None}
        if turn.tool_calls:
            reply["tool_calls"] = turn.tool_calls
        return anchor_of(view.messages, reply, turn.turn_index)

    # --- request path ------------------------------------------------------------------------

    def assign(self, hints: SessionHints, messages: list[dict[str, Any]]) -> Assignment:
        """The session and turn index for a request; submits the previous turn's next state."""
        keys = [message_key(m) for m in messages]  # hashing outside the lock
        now = datetime.now(UTC)
        with self._lock:
            session_id, source, reply_pos = self._identify(hints, keys, messages)
            if hints.turn_type == "internal":  # never logged: no index, no state change
                return Assignment(session_id, -1, "internal", source)
            state = self._sessions.get(session_id) or self._open(session_id, now, fresh=source == "new")
            index = state.next_index
            state.next_index += 1
            state.last_seen = now
            state.in_flight += 1
            if hints.done:
                state.closing.add(index)
            if hints.turn_type == "main":
                self._attach_next_state(state, keys, messages, reply_pos, now)
            return Assignment(session_id, index, hints.turn_type, source)

    def complete(self, record: TurnRecord) -> None:
        """Remember the reply for matching, then hand the record to the logger."""
        anchor = None
        if record.turn_type == "main" and record.error is None:
            anchor = anchor_of(record.messages, reply_message(record), record.turn_index)  # outside the lock
        with self._lock:
            state = self._sessions.get(record.session_id)
            closing = record.close_session or (state is not None and record.turn_index in state.closing)
            if closing and not record.close_session:
                record = replace(record, close_session=True)
            self._logger.submit(record)
            if state is None or record.turn_type == "internal":
                return
            state.in_flight = max(0, state.in_flight - 1)
            state.last_seen = max(state.last_seen, datetime.now(UTC))
            state.closing.discard(record.turn_index)
            if closing:
                self._retire(state)
            elif anchor is not None:
                if state.anchor is None or anchor.turn_index > state.anchor.turn_index:
                    self._set_anchor(state, anchor)
            elif record.turn_type == "main" and state.anchor is not None and not state.indexed:
                self._index(state)  # failed turn: let the client's retry match the same reply again

    def sweep_idle(self, now: datetime) -> None:
        """Close sessions idle longer than the timeout, and forget them."""
        with self._lock:
            for state in list(self._sessions.values()):
                idle = aware(now) - state.last_seen
                # A turn in flight holds its session open, unless it has been silent for very long.
                if idle > self._idle and (state.in_flight == 0 or idle > 2 * self._idle):
                    self._retire(state)
                    self._logger.submit(SessionClose(state.id, "idle", now))

    def open_sessions(self) -> int:
        with self._lock:
            return len(self._sessions)

    # --- internals (called with the lock held) -----------------------------------------------

    def _identify(
        self, hints: SessionHints, keys: list[str], messages: list[dict[str, Any]]
    ) -> tuple[str, str, int | None]:
        """(session id, source, position of the awaited reply in the request if already found)."""
        for raw, source in (
            (hints.header_session_id, "header"),
            (hints.body_session_id, "body"),
            (hints.affinity_id, "affinity"),
        ):
            if raw:
                return bounded_id(raw), source, None
        for pos in range(len(messages) - 1, -1, -1):
            if messages[pos].get("role") != "assistant":
                continue
            match = self._continuing(keys, pos)
            if match is not None:
                return match, "inferred", pos
        return f"s_{uuid.uuid4().hex}", "new", None

    def _continuing(self, keys: list[str], pos: int) -> str | None:
        """The session whose awaited reply sits at `pos` after a prefix of its own request."""
        candidates = []
        for sid in self._by_reply.get(keys[pos], ()):
            anchor = self._sessions[sid].anchor
            if anchor is None or pos > len(anchor.request_keys):
                continue
            if anchor.request_keys[:pos] == keys[:pos]:
                candidates.append(self._sessions[sid])
        if not candidates:
            return None
        # Identical conversations are interchangeable; serve the one waiting longest first.
        return min(candidates, key=lambda s: s.last_seen).id

    def _attach_next_state(
        self,
        state: _SessionState,
        keys: list[str],
        messages: list[dict[str, Any]],
        reply_pos: int | None,
        now: datetime,
    ) -> None:
        anchor = state.anchor
        if anchor is None:
            return
        if reply_pos is None:
            reply_pos = _locate_reply(keys, messages, anchor)
        if reply_pos is None:
            return  # the client did not send our reply back (new topic, edited history): no feedback
        self._unindex(state)
        if anchor.answered:
            return  # a retry of a failed turn: its next state is already on its way
        anchor.answered = True
        next_state = next_state_of(messages[reply_pos + 1 :], anchor, messages[reply_pos])
        self._logger.submit(NextStateRecord(state.id, anchor.turn_index, next_state, now))

    def _open(self, session_id: str, now: datetime, *, fresh: bool) -> _SessionState:
        next_index = 0 if fresh else self._retired.pop(session_id, None)
        if next_index is None:
            next_index = self._next_index_in_db(session_id)
        state = _SessionState(id=session_id, next_index=next_index, last_seen=now)
        self._sessions[session_id] = state
        return state

    def _next_index_in_db(self, session_id: str) -> int:
        """A client id that may have turns from before this process started."""
        try:
            with self._factory() as session:
                n_turns = session.scalar(select(ChatSession.n_turns).where(ChatSession.id == session_id))
                max_index = session.scalar(
                    select(func.max(Turn.turn_index)).where(Turn.session_id == session_id)
                )
        except SQLAlchemyError:
            # Serving beats numbering: if the id had turns, the logger reports the clash loudly.
            log.exception("could not read session %s; numbering its turns from 0", session_id)
            return 0
        return max(n_turns or 0, (max_index if max_index is not None else -1) + 1)

    def _retire(self, state: _SessionState) -> None:
        self._unindex(state)
        self._sessions.pop(state.id, None)
        self._retired[state.id] = state.next_index
        while len(self._retired) > _RETIRED_KEPT:
            self._retired.popitem(last=False)

    def _set_anchor(self, state: _SessionState, anchor: _Anchor) -> None:
        self._unindex(state)
        state.anchor = anchor
        self._index(state)

    def _index(self, state: _SessionState) -> None:
        if state.anchor is not None and not state.indexed:
            self._by_reply.setdefault(state.anchor.reply_key, set()).add(state.id)
            state.indexed = True

    def _unindex(self, state: _SessionState) -> None:
        if state.anchor is None or not state.indexed:
            return
        ids = self._by_reply.get(state.anchor.reply_key)
        if ids is not None:
            ids.discard(state.id)
            if not ids:
                del self._by_reply[state.anchor.reply_key]
        state.indexed = False


def _locate_reply(keys: list[str], messages: list[dict[str, Any]], anchor: _Anchor) -> int | None:
    """Where a named session's request echoes the awaited reply.

    First by the reply itself (latest first); failing that, an assistant message right after the
    previous request's own messages, which covers clients that edit the reply before sending it back.
    """
    for pos in range(len(messages) - 1, -1, -1):
        if messages[pos].get("role") == "assistant" and keys[pos] == anchor.reply_key:
            return pos
    pos = anchor.history_len
    if pos < len(messages) and messages[pos].get("role") == "assistant":
        return pos if keys[:pos] == anchor.request_keys[:pos] else None
    return None
