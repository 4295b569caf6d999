"""The review JSON API under `/review/api`: sessions, turns, labels, stats and adapter actions.

Routes are thin: they resolve the reviewer and a DB session, call `review.queries`, and commit at
the request boundary when they write. Errors are OpenAI-shaped (see `review.errors`).
"""

# No `from __future__ import annotations`: FastAPI must see the local Annotated aliases.

from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session, sessionmaker

from core import pointer
from core.settings import Settings
from review import queries
from review.auth import Reviewer, authenticate, clean_author
from review.errors import ApiRoute, ReviewError
from review.filters import SCORE_CHOICES, TurnFilters


class LabelIn(BaseModel):
    """A human label for one turn. The newest label is the one in force; older ones are kept."""

    model_config = ConfigDict(extra="forbid")
    value: Literal[-1, 0, 1] = Field(description="-1 bad, 0 neutral, +1 good.")
    hint: str | None = Field(default=None, max_length=8000, description="What the reply should have done.")
    author: str | None = Field(default=None, max_length=64, description="Defaults to the reviewer's name.")


class LabelOut(BaseModel):
    id: int
    turn_id: int
    value: int
    hint: str | None
    author: str
    created_at: str | None


def turn_filters(
    q: Annotated[str | None, Query(description="Text in the session id or the response.")] = None,
    score: Annotated[str | None, Query(description=f"One of {', '.join(SCORE_CHOICES)}.")] = None,
    has_hint: Annotated[str | None, Query(description="true or false.")] = None,
    score_source: Annotated[str | None, Query(description="signal, reaction, votes, ...")] = None,
    turn_type: Annotated[str | None, Query(description="main or side.")] = None,
    adapter_version: Annotated[str | None, Query(description="A version id, or 'base'.")] = None,
    labeled: Annotated[str | None, Query(description="true or false.")] = None,
    since: Annotated[str | None, Query(description="ISO date or datetime (inclusive).")] = None,
    until: Annotated[str | None, Query(description="ISO date or datetime (inclusive).")] = None,
) -> TurnFilters:
    """Filters from the query string; bad values raise a 422 that names the parameter."""
    return TurnFilters.parse(
        q=q,
        score=score,
        has_hint=has_hint,
        score_source=score_source,
        turn_type=turn_type,
        adapter_version=adapter_version,
        labeled=labeled,
        since=since,
        until=until,
    )


def make_dependencies(
    settings: Settings, session_factory: sessionmaker[Session]
) -> tuple[Callable[[Request], Reviewer], Callable[[], Iterator[Session]]]:
    """The reviewer and DB-session dependencies, bound to this app's settings and DB."""

    def reviewer(request: Request) -> Reviewer:
        return authenticate(request, settings)

    def db() -> Iterator[Session]:
        with session_factory() as session:
            yield session

    return reviewer, db


def create_api_router(
    settings: Settings, session_factory: sessionmaker[Session], *, prefix: str = "/review/api"
) -> APIRouter:
    reviewer, get_db = make_dependencies(settings, session_factory)
    router = APIRouter(prefix=prefix, route_class=ApiRoute, tags=["review"], dependencies=[Depends(reviewer)])
    _add_read_routes(router, get_db)
    _add_write_routes(router, reviewer, get_db)
    return router


def _add_read_routes(router: APIRouter, get_db: Callable[[], Iterator[Session]]) -> None:
    DB = Annotated[Session, Depends(get_db)]
    Filters = Annotated[TurnFilters, Depends(turn_filters)]
    Limit = Annotated[int, Query(ge=1, le=500)]
    Offset = Annotated[int, Query(ge=0)]

    @router.get("/sessions", summary="Sessions with a turn matching the filters, newest first")
    def list_sessions(db: DB, filters: Filters, limit: Limit = 50, offset: Offset = 0) -> dict[str, Any]:
        return queries.list_sessions(db, filters, limit=limit, offset=offset)

    @router.get("/sessions/{session_id}", summary="One session with every turn resolved")
    def get_session(session_id: str, db: DB) -> dict[str, Any]:
        detail = queries.session_detail(db, session_id)
        if detail is None:
            raise ReviewError(404, f"No session {session_id!r}.", param="session_id", code="not_found")
        return detail

    @router.get("/turns", summary="Turns matching the filters, newest first")
    def list_turns(db: DB, filters: Filters, limit: Limit = 50, offset: Offset = 0) -> dict[str, Any]:
        return queries.list_turns(db, filters, limit=limit, offset=offset)

    @router.get("/turns/{turn_id}", summary="One turn: context, output, next state, votes, labels")
    def get_turn(turn_id: int, db: DB, tokens: bool = False) -> dict[str, Any]:
        return queries.turn_detail(db, _turn_or_404(db, turn_id), tokens=tokens)

    @router.get("/turns/{turn_id}/labels", summary="Every label set on a turn, newest first")
    def label_history(turn_id: int, db: DB) -> list[LabelOut]:
        turn = _turn_or_404(db, turn_id)
        return [LabelOut(**queries.label_dict(lab)) for lab in sorted(turn.labels, key=lambda x: -x.id)]

    @router.get("/stats", summary="Overview figures")
    def get_stats(db: DB) -> dict[str, Any]:
        return queries.stats(db)

    @router.get("/adapters", summary="Adapter versions with metrics and what they served")
    def list_adapters(db: DB) -> dict[str, Any]:
        return queries.adapter_versions(db)


def _add_write_routes(
    router: APIRouter, reviewer: Callable[[Request], Reviewer], get_db: Callable[[], Iterator[Session]]
) -> None:
    DB = Annotated[Session, Depends(get_db)]

    @router.put("/turns/{turn_id}/label", summary="Set a human label (-1, 0 or +1, optional hint)")
    def put_label(
        turn_id: int, body: LabelIn, db: DB, who: Annotated[Reviewer, Depends(reviewer)]
    ) -> LabelOut:
        try:
            label = queries.add_label(
                db,
                turn_id,
                value=body.value,
                hint=body.hint,
                author=clean_author(body.author) if body.author else who.author,
            )
        except KeyError:
            raise ReviewError(404, f"No turn {turn_id}.", param="turn_id", code="not_found") from None
        db.commit()
        return LabelOut(**queries.label_dict(label))

    @router.post("/adapters/{version_id}/promote", summary="Serve this adapter version from now on")
    def promote(version_id: int, db: DB) -> dict[str, Any]:
        return {"current": promote_version(db, version_id)}

    @router.post("/adapters/rollback", summary="Roll back the served version to the one before it")
    def rollback(db: DB) -> dict[str, Any]:
        return {"current": rollback_version(db)}


def _turn_or_404(db: Session, turn_id: int) -> Any:
    turn = queries.get_turn(db, turn_id)
    if turn is None:
        raise ReviewError(404, f"No turn {turn_id}.", param="turn_id", code="not_found")
    return turn


def promote_version(db: Session, version_id: int) -> int:
    """Publish a version through `core.pointer`; 404 unknown, 409 when its state forbids serving."""
    try:
        pointer.publish(db, version_id)
    except KeyError:
        raise ReviewError(
            404, f"No adapter version {version_id}.", param="version_id", code="not_found"
        ) from None
    except ValueError as exc:
        raise ReviewError(409, str(exc), param="version_id", code="conflict") from None
    db.commit()
    return version_id


def rollback_version(db: Session) -> int | None:
    """Roll back through `core.pointer`; 409 when the base model is already served."""
    try:
        target = pointer.rollback(db)
    except ValueError as exc:
        raise ReviewError(409, str(exc), code="conflict") from None
    db.commit()
    return target
