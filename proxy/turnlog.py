"""The write-behind turn logger: the request path hands it records, one thread writes them in batches.

Items are applied in FIFO order, so a turn's `NextStateRecord` always lands after its `TurnRecord`,
and each batch is one transaction. A batch that fails to commit is retried item by item, so one bad
record never loses the others. After a commit, `on_ready` is called with the ids of the turns that
just became `ready`; if that hook fails, the turns stay `ready` in the DB and `pending_ready_ids`
finds them for a later sweep.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker

from core.blobs import TOKEN_CHUNK, canonical_json, digest, json_row
from core.models import Blob, ChatSession, Turn, TurnStatus
from core.tokens import pack_floats, pack_ids
from proxy.records import NextStateRecord, SessionClose, TurnRecord

log = logging.getLogger(__name__)

LogItem = TurnRecord | NextStateRecord | SessionClose
_STOP = object()  # queue sentinel: everything before it is drained, then the thread exits
_OVERFLOW_WAIT_S = 0.5  # how long submit waits on a full queue before it complains loudly


@dataclass
class LoggerStats:
    """Counters for health pages and benchmarks."""

    items: int = 0
    batches: int = 0
    retried_batches: int = 0
    failed_items: int = 0
    overflows: int = 0
    hook_errors: int = 0


def aware(dt: datetime) -> datetime:
    """SQLite hands back naive datetimes; every time we store is UTC."""
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


class _KnownBlobs:
    """Hashes already committed, so repeated content (the system prompt) is not recompressed."""

    def __init__(self, capacity: int = 200_000) -> None:
        self._hashes: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity

    def __contains__(self, hash_: str) -> bool:
        return hash_ in self._hashes

    def add_all(self, hashes: Iterable[str]) -> None:
        for h in hashes:
            self._hashes[h] = None
            self._hashes.move_to_end(h)
        while len(self._hashes) > self._capacity:
            self._hashes.popitem(last=False)


class TurnLogger:
    """One background thread that writes turns, next states and session closes in batches."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        *,
        flush_interval_s: float,
        batch_size: int,
        on_ready: Callable[[list[int]], None],
        max_queue: int = 10_000,
    ) -> None:
        self._factory = session_factory
        self._flush_interval_s = flush_interval_s
        self._batch_size = max(1, batch_size)
        self._on_ready = on_ready
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queue)
        self._thread: threading.Thread | None = None
        self._known = _KnownBlobs()
        self._staged: set[str] = set()  # blob hashes written by the open transaction
        self._write_lock = threading.Lock()  # the worker and a post-stop submit never write at once
        self.stats = LoggerStats()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="turn-logger", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Drain the queue and flush everything, so every delivered response is in the DB."""
        if self._thread is None:
            return
        self._queue.put(_STOP)  # blocks only while full, and the worker is draining it
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("turn logger did not drain within %.1fs; %d items queued", timeout, self._queue.qsize())
            return
        self._thread = None
        self._drain_leftovers()

    def submit(self, item: LogItem) -> None:
        """Queue an item without blocking the request path (a full queue waits briefly, then loudly)."""
        if isinstance(item, TurnRecord) and item.turn_type == "internal":
            return  # internal calls are never logged
        if self._thread is None:
            # Stopped or never started: write it here rather than lose it.
            log.warning("turn logger is not running; writing %s synchronously", type(item).__name__)
            self._write([item])
            return
        try:
            self._queue.put(item, timeout=_OVERFLOW_WAIT_S)
        except queue.Full:
            self.stats.overflows += 1
            log.error("turn logger queue is full (%d items); the request path now waits", self._queue.maxsize)
            self._queue.put(item)  # never drop: back-pressure beats a missing turn
        if self._thread is None:  # stop() finished while we were queueing: nobody else will drain
            self._drain_leftovers()

    def queued(self) -> int:
        return self._queue.qsize()

    # --- worker ------------------------------------------------------------------------------

    def _run(self) -> None:
        done = False
        while not done:
            batch, done = self._collect()
            if not batch:
                continue
            try:
                self._write(batch)
            except Exception:  # the writer must outlive any one batch, or stop() would hang
                self.stats.failed_items += len(batch)
                log.exception("turn logger failed on a batch of %d items", len(batch))

    def _collect(self) -> tuple[list[LogItem], bool]:
        """Up to batch_size items, waiting at most flush_interval after the first one."""
        first = self._queue.get()
        if first is _STOP:
            return [], True
        batch: list[LogItem] = [first]
        deadline = time.monotonic() + self._flush_interval_s
        while len(batch) < self._batch_size:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return batch, True
            batch.append(item)
        return batch, False

    def _drain_leftovers(self) -> None:
        """Items that raced past the sentinel (submitted while stopping) are written too."""
        leftovers: list[LogItem] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                leftovers.append(item)
        if leftovers:
            self._write(leftovers)

    def _write(self, batch: list[LogItem]) -> None:
        with self._write_lock:
            ready = self._commit_batch(batch)
            if ready is None:
                self.stats.retried_batches += 1
                ready = self._commit_one_by_one(batch)
            self.stats.items += len(batch)
        if ready:
            try:
                self._on_ready(ready)
            except Exception:
                # The turns are `ready` in the DB; pending_ready_ids() lets a sweep re-enqueue them.
                self.stats.hook_errors += 1
                log.exception("on_ready hook failed for %d turns; they stay ready for a sweep", len(ready))

    def _commit_batch(self, batch: list[LogItem]) -> list[int] | None:
        self._staged = set()
        try:
            with self._factory() as session:
                ready: list[int] = []
                for item in batch:
                    ready.extend(self._apply(session, item))
                session.commit()
        except Exception:
            log.warning("batch of %d failed to commit; retrying item by item", len(batch), exc_info=True)
            return None
        self._known.add_all(self._staged)
        self.stats.batches += 1
        return ready

    def _commit_one_by_one(self, batch: list[LogItem]) -> list[int]:
        ready: list[int] = []
        for item in batch:
            self._staged = set()
            try:
                with self._factory() as session:
                    ids = self._apply(session, item)
                    session.commit()
            except Exception:
                self.stats.failed_items += 1
                log.exception("could not log %s; it is lost", describe(item))
                continue
            self._known.add_all(self._staged)
            self.stats.batches += 1
            ready.extend(ids)
        return ready

    # --- applying items ----------------------------------------------------------------------

    def _apply(self, session: Session, item: LogItem) -> list[int]:
        if isinstance(item, TurnRecord):
            self._apply_turn(session, item)
            if item.close_session:
                close_session(session, SessionClose(item.session_id, "done_header", item.created_at))
            return []
        if isinstance(item, NextStateRecord):
            return apply_next_state(session, item)
        close_session(session, item)
        return []

    def _apply_turn(self, session: Session, record: TurnRecord) -> None:
        upsert_session(session, record)
        blobs: list[dict[str, Any]] = []
        message_refs = [self._json_ref(m, blobs) for m in record.messages]
        tools_ref = self._json_ref(record.tools, blobs) if record.tools else None
        prompt_refs = self._ids_refs(record.prompt_token_ids, blobs)
        insert_new_blobs(session, blobs)
        session.add(
            Turn(
                session_id=record.session_id,
                turn_index=record.turn_index,
                turn_type=record.turn_type,
                status=turn_status(record),
                request_id=record.request_id,
                model=record.model,
                adapter_version_id=record.adapter_version_id,
                created_at=record.created_at,
                message_refs=message_refs,
                tools_ref=tools_ref,
                params=record.params,
                response_text=record.response_text,
                tool_calls=record.tool_calls,
                finish_reason=record.finish_reason,
                error=record.error,
                prompt_token_refs=prompt_refs,
                prompt_len=len(record.prompt_token_ids),
                response_token_ids=pack_ids(record.response_token_ids),
                response_logprobs=pack_floats(record.response_logprobs),
                n_response_tokens=len(record.response_token_ids),
                queue_ms=record.queue_ms,
                ttft_ms=record.ttft_ms,
                total_ms=record.total_ms,
            )
        )
        session.flush()  # a NextStateRecord later in this batch must find the row

    def _json_ref(self, obj: Any, out: list[dict[str, Any]]) -> str:
        hash_ = digest("json", canonical_json(obj))
        if hash_ not in self._known and hash_ not in self._staged:
            out.append(json_row(obj))
            self._staged.add(hash_)
        return hash_

    def _ids_refs(self, ids: list[int], out: list[dict[str, Any]]) -> list[str]:
        refs = []
        for start in range(0, len(ids), TOKEN_CHUNK):
            raw = pack_ids(ids[start : start + TOKEN_CHUNK])
            hash_ = digest("ids", raw)
            if hash_ not in self._known and hash_ not in self._staged:
                out.append({"hash": hash_, "kind": "ids", "size": len(raw), "data": zlib.compress(raw)})
                self._staged.add(hash_)
            refs.append(hash_)
        return refs


def turn_status(record: TurnRecord) -> str:
    if record.error is not None:
        return TurnStatus.failed
    if record.turn_type != "main":
        return TurnStatus.skipped
    return TurnStatus.awaiting_next_state


def _insert_for(session: Session) -> Any:
    return pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert


def insert_new_blobs(session: Session, rows: list[dict[str, Any]]) -> None:
    """Like `core.blobs.insert_blobs`, but as one cached executemany statement.

    A multi-VALUES insert is compiled afresh for every row count (about 10 ms each on our CPUs),
    which dominated the logger's time per turn; the executemany form compiles once.
    """
    if rows:
        stmt = _insert_for(session)(Blob).on_conflict_do_nothing(index_elements=["hash"])
        session.execute(stmt, rows)


def upsert_session(session: Session, record: TurnRecord) -> None:
    """Create the session row if absent (safe against another replica), then bump it."""
    values = {
        "id": record.session_id,
        "source": record.session_source,
        "created_at": record.created_at,
        "last_seen_at": record.created_at,
        "n_turns": 0,
        "client": record.client or None,
    }
    session.execute(_insert_for(session)(ChatSession).on_conflict_do_nothing(index_elements=["id"]), [values])
    row = session.get(ChatSession, record.session_id, populate_existing=True)
    assert row is not None  # just inserted or already there
    if aware(record.created_at) > aware(row.last_seen_at):
        row.last_seen_at = record.created_at
    row.n_turns = max(row.n_turns, record.turn_index + 1)
    if row.closed_at is not None:  # a closed session that is used again is reopened
        row.closed_at = None
        row.closed_reason = None


def apply_next_state(session: Session, record: NextStateRecord) -> list[int]:
    """Attach the next state to an awaiting turn; returns its id when it became ready."""
    turn = session.scalars(
        select(Turn).where(Turn.session_id == record.session_id, Turn.turn_index == record.turn_index)
    ).first()
    if turn is None:
        log.warning("next state for unknown turn %s#%d", record.session_id, record.turn_index)
        return []
    if turn.status != TurnStatus.awaiting_next_state:
        log.debug("next state for %s#%d ignored: %s", record.session_id, record.turn_index, turn.status)
        return []
    turn.next_state = record.next_state
    turn.next_state_at = record.at
    turn.status = TurnStatus.ready
    session.flush()
    return [turn.id]


def close_session(session: Session, item: SessionClose) -> None:
    """Close the session; turns still awaiting a next state can never be judged, so skip them."""
    row = session.get(ChatSession, item.session_id)
    if row is None:
        log.warning("close for unknown session %s", item.session_id)
        return
    if row.closed_at is None:
        row.closed_at = item.at
        row.closed_reason = item.reason
    session.execute(
        update(Turn)
        .where(Turn.session_id == item.session_id, Turn.status == TurnStatus.awaiting_next_state)
        .values(status=TurnStatus.skipped)
        .execution_options(synchronize_session=False)
    )


def pending_ready_ids(session_factory: sessionmaker[Session]) -> list[int]:
    """Turns that became ready but were never picked up (the hook failed or the process died)."""
    with session_factory() as session:
        return list(session.scalars(select(Turn.id).where(Turn.status == TurnStatus.ready).order_by(Turn.id)))


def describe(item: LogItem) -> str:
    if isinstance(item, SessionClose):
        return f"SessionClose({item.session_id})"
    return f"{type(item).__name__}({item.session_id}#{item.turn_index})"
