"""Reading a logged turn back: its messages, tools and exact token ids, for judges and learner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.blobs import load_ids, load_json, load_json_many
from core.models import Label, Turn
from core.tokens import unpack_floats, unpack_ids


@dataclass(frozen=True)
class TurnView:
    """A turn with its blobs resolved."""

    turn: Turn
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    response_logprobs: list[float]


def load_turn(session: Session, turn_id: int, *, with_tokens: bool = True) -> TurnView | None:
    turn = session.get(Turn, turn_id)
    if turn is None:
        return None
    return view_of(session, turn, with_tokens=with_tokens)


def view_of(session: Session, turn: Turn, *, with_tokens: bool = True) -> TurnView:
    messages = load_json_many(session, turn.message_refs) if turn.message_refs else []
    tools = load_json(session, turn.tools_ref) if turn.tools_ref else None
    return TurnView(
        turn=turn,
        messages=messages,
        tools=tools,
        prompt_token_ids=load_ids(session, turn.prompt_token_refs) if with_tokens else [],
        response_token_ids=unpack_ids(turn.response_token_ids) if with_tokens else [],
        response_logprobs=unpack_floats(turn.response_logprobs) if with_tokens else [],
    )


def latest_label(session: Session, turn_id: int) -> Label | None:
    return session.scalars(
        select(Label).where(Label.turn_id == turn_id).order_by(Label.id.desc()).limit(1)
    ).first()
