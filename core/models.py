"""The feedback DB: sessions, turns, judge votes, human labels and adapter versions.

Repeated content (the system prompt, the tools, earlier messages, long shared token prefixes) is
stored once in `blobs`, by content hash, and turns refer to it (see `core.blobs`).
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class TurnStatus(enum.StrEnum):
    """A turn's lifecycle: logged → awaiting next state → judging → judged → hinted → trained."""

    logged = "logged"  # written, session still open, no later request yet (kept for side turns)
    awaiting_next_state = "awaiting_next_state"
    ready = "ready"  # next state attached, queued for the judge
    judging = "judging"
    judged = "judged"
    hinted = "hinted"
    trained = "trained"
    skipped = "skipped"  # side turns and turns that can never be judged
    failed = "failed"  # the engine failed: logged for review, never trained on


class AdapterState(enum.StrEnum):
    training = "training"
    ready = "ready"  # saved, not yet served
    published = "published"
    retired = "retired"
    rolled_back = "rolled_back"
    rejected = "rejected"  # failed the check before publishing (learner/publish_check.py); never served
    failed = "failed"


class Blob(Base):
    """Content-addressed storage: zlib-compressed JSON or packed token ids, keyed by sha256."""

    __tablename__ = "blobs"
    hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # "json" or "ids"
    size: Mapped[int] = mapped_column(Integer)  # uncompressed bytes
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ChatSession(Base):
    __tablename__ = "sessions"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    source: Mapped[str] = mapped_column(String(32))  # header, body, affinity, inferred, new
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    closed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    closed_reason: Mapped[str | None] = mapped_column(String(32))  # done_header, idle
    n_turns: Mapped[int] = mapped_column(Integer, default=0)
    client: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # user agent and similar

    turns: Mapped[list[Turn]] = relationship(back_populates="session", order_by="Turn.turn_index")


class Turn(Base):
    __tablename__ = "turns"
    __table_args__ = (
        UniqueConstraint("session_id", "turn_index"),
        Index("ix_turns_status", "status"),
        Index("ix_turns_created", "created_at"),
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"), index=True)
    turn_index: Mapped[int] = mapped_column(Integer)
    turn_type: Mapped[str] = mapped_column(String(16), default="main")  # main or side
    status: Mapped[str] = mapped_column(String(24), default=TurnStatus.logged)
    request_id: Mapped[str] = mapped_column(String(64), index=True)
    model: Mapped[str] = mapped_column(String(256))  # as requested by the client
    adapter_version_id: Mapped[int | None] = mapped_column(ForeignKey("adapter_versions.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    # request: message and tool blobs by hash; sampling params and ignored fields as JSON
    message_refs: Mapped[list[Any]] = mapped_column(JSON)
    tools_ref: Mapped[str | None] = mapped_column(String(64))
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    # response
    response_text: Mapped[str] = mapped_column(Text, default="")
    tool_calls: Mapped[list[Any] | None] = mapped_column(JSON)
    finish_reason: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)

    # exact engine tokens
    prompt_token_refs: Mapped[list[Any]] = mapped_column(JSON, default=list)  # chunk blob hashes
    prompt_len: Mapped[int] = mapped_column(Integer, default=0)
    response_token_ids: Mapped[bytes] = mapped_column(LargeBinary, default=b"")
    response_logprobs: Mapped[bytes] = mapped_column(LargeBinary, default=b"")
    n_response_tokens: Mapped[int] = mapped_column(Integer, default=0)

    # timings in milliseconds
    queue_ms: Mapped[float | None] = mapped_column(Float)
    ttft_ms: Mapped[float | None] = mapped_column(Float)
    total_ms: Mapped[float | None] = mapped_column(Float)

    # next state: the tool results and user reply that followed this turn
    next_state: Mapped[list[Any] | None] = mapped_column(JSON)
    next_state_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    # judgement
    score: Mapped[int | None] = mapped_column(Integer)
    score_source: Mapped[str | None] = mapped_column(String(16))  # signal, reaction, votes
    score_reason: Mapped[str | None] = mapped_column(Text)
    judge_status: Mapped[str | None] = mapped_column(String(16))  # ok, unparsed, error
    judged_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    hint: Mapped[str | None] = mapped_column(Text)
    hint_source: Mapped[str | None] = mapped_column(String(16))  # judge, instruction, correction, label

    # training
    trained_version_id: Mapped[int | None] = mapped_column(ForeignKey("adapter_versions.id"))
    advantage: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # summary of what training used

    session: Mapped[ChatSession] = relationship(back_populates="turns")
    votes: Mapped[list[Vote]] = relationship(back_populates="turn", order_by="Vote.id")
    labels: Mapped[list[Label]] = relationship(back_populates="turn", order_by="Label.id")


class Vote(Base):
    """One judge call: a PRM score vote (kind=prm) or a hint candidate (kind=hint)."""

    __tablename__ = "votes"
    __table_args__ = (UniqueConstraint("turn_id", "kind", "vote_index"),)
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    turn_id: Mapped[int] = mapped_column(ForeignKey("turns.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    vote_index: Mapped[int] = mapped_column(Integer)
    raw_text: Mapped[str] = mapped_column(Text)
    score: Mapped[int | None] = mapped_column(Integer)  # None: could not be parsed
    hint: Mapped[str | None] = mapped_column(Text)
    judge_model: Mapped[str] = mapped_column(String(256))
    template_name: Mapped[str] = mapped_column(String(64))
    template_version: Mapped[str] = mapped_column(String(32))
    latency_ms: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    turn: Mapped[Turn] = relationship(back_populates="votes")


class Label(Base):
    """A human label. Append-only: the newest row for a turn is the one in force."""

    __tablename__ = "labels"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    turn_id: Mapped[int] = mapped_column(ForeignKey("turns.id"), index=True)
    value: Mapped[int] = mapped_column(Integer)  # -1, 0 or +1
    hint: Mapped[str | None] = mapped_column(Text)
    author: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    turn: Mapped[Turn] = relationship(back_populates="labels")


class AdapterVersion(Base):
    __tablename__ = "adapter_versions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # the version number
    name: Mapped[str] = mapped_column(String(128), unique=True)  # unique engine name, never reused
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("adapter_versions.id"))
    state: Mapped[str] = mapped_column(String(16), default=AdapterState.training)
    path: Mapped[str | None] = mapped_column(Text)
    base_model: Mapped[str] = mapped_column(String(256))
    method: Mapped[str] = mapped_column(String(16))
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    n_samples: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    published_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ServingPointer(Base):
    """The single row that says which adapter version every proxy replica serves (None: base)."""

    __tablename__ = "serving_pointer"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, default=1)
    version_id: Mapped[int | None] = mapped_column(ForeignKey("adapter_versions.id"))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
