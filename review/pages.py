"""The server-rendered review pages: login, overview, sessions, session detail, adapters.

Forms post back and redirect (post/redirect/get), so a reload never resubmits. Writes go through
the same functions as the JSON API.
"""

# No `from __future__ import annotations`: FastAPI must see the local Annotated aliases.

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Query
from fastapi.responses import FileResponse, RedirectResponse, Response
from sqlalchemy.orm import Session, sessionmaker

from core.settings import Settings
from review import charts, queries
from review.api import make_dependencies, promote_version, rollback_version, turn_filters
from review.auth import AUTHOR_COOKIE, COOKIE_MAX_AGE_S, COOKIE_NAME, Reviewer, check_token, cookie_value
from review.errors import ReviewError, page_route_class
from review.filters import TurnFilters
from review.render import Renderer

STATIC = Path(__file__).parent / "static"
STATIC_FILES = {"review.css": "text/css", "review.js": "text/javascript"}
PAGE_SIZE = 50
SCORE_COLORS = ("#dc2626", "#9ca3af", "#059669", "#d1d5db")


def create_pages_router(
    settings: Settings, session_factory: sessionmaker[Session], renderer: Renderer
) -> APIRouter:
    reviewer, get_db = make_dependencies(settings, session_factory)
    router = APIRouter(
        prefix=renderer.base, route_class=page_route_class(renderer.error), include_in_schema=False
    )
    _add_login_routes(router, settings, renderer)
    _add_browse_routes(router, renderer, reviewer, get_db)
    _add_action_routes(router, renderer, reviewer, get_db)
    return router


def _add_login_routes(router: APIRouter, settings: Settings, renderer: Renderer) -> None:
    base = renderer.base

    @router.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in STATIC_FILES:
            raise ReviewError(404, f"No static file {name!r}.")
        return FileResponse(STATIC / name, media_type=STATIC_FILES[name])

    @router.get("/login")
    def login_form(next: str = "") -> Response:
        return renderer.page("login.html", next=_safe_next(next, base), message=None, logged_in=False)

    @router.post("/login")
    def login(
        token: Annotated[str, Form()] = "",
        name: Annotated[str, Form()] = "",
        next: Annotated[str, Form()] = "",
    ) -> Response:
        try:
            check_token(settings, token.strip())
        except ReviewError as err:
            status = err.status
            return renderer.page("login.html", status=status, message=err.message, next=next, logged_in=False)
        response = RedirectResponse(_safe_next(next, base), status_code=303)
        # SameSite=Strict keeps other sites from posting forms with this cookie (no CSRF token needed).
        cookie = {"httponly": True, "samesite": "strict", "path": base, "max_age": COOKIE_MAX_AGE_S}
        response.set_cookie(COOKIE_NAME, cookie_value(settings), **cookie)  # type: ignore[arg-type]
        response.set_cookie(AUTHOR_COOKIE, name.strip()[:64] or "admin", **cookie)  # type: ignore[arg-type]
        return response

    @router.post("/logout")
    def logout() -> Response:
        response = RedirectResponse(f"{base}/login", status_code=303)
        response.delete_cookie(COOKIE_NAME, path=base)
        return response


def _add_browse_routes(
    router: APIRouter, renderer: Renderer, reviewer: Callable[..., Reviewer], get_db: Callable[..., Any]
) -> None:
    DB = Annotated[Session, Depends(get_db)]
    Who = Annotated[Reviewer, Depends(reviewer)]
    Filters = Annotated[TurnFilters, Depends(turn_filters)]
    base = renderer.base

    @router.get("")
    @router.get("/")
    def overview(who: Who, db: DB) -> Response:
        data = queries.stats(db)
        return renderer.page(
            "overview.html", stats=data, charts=_overview_charts(data), who=who, logged_in=True
        )

    @router.get("/sessions")
    def sessions(who: Who, db: DB, filters: Filters, page: Annotated[int, Query(ge=1)] = 1) -> Response:
        listing = queries.list_sessions(db, filters, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
        versions = queries.adapter_versions(db)["versions"]
        return renderer.page(
            "sessions.html",
            listing=listing,
            filters=filters,
            args=filters.query_args(),
            page=page,
            page_size=PAGE_SIZE,
            versions=versions,
            who=who,
            logged_in=True,
        )

    @router.get("/sessions/{session_id}")
    def session_page(session_id: str, who: Who, db: DB, labeled: int | None = None) -> Response:
        detail = queries.session_detail(db, session_id)
        if detail is None:
            raise ReviewError(404, f"No session {session_id!r}.")
        return renderer.page("session.html", s=detail, labeled=labeled, who=who, logged_in=True)

    @router.get("/turns/{turn_id}")
    def turn_page(turn_id: int, who: Who, db: DB) -> Response:
        turn = queries.get_turn(db, turn_id)
        if turn is None:
            raise ReviewError(404, f"No turn {turn_id}.")
        return RedirectResponse(f"{base}/sessions/{turn.session_id}#turn-{turn_id}", status_code=303)

    @router.get("/adapters")
    def adapters(who: Who, db: DB, done: str | None = None) -> Response:
        return renderer.page(
            "adapters.html", data=queries.adapter_versions(db), done=done, who=who, logged_in=True
        )


def _add_action_routes(
    router: APIRouter, renderer: Renderer, reviewer: Callable[..., Reviewer], get_db: Callable[..., Any]
) -> None:
    DB = Annotated[Session, Depends(get_db)]
    Who = Annotated[Reviewer, Depends(reviewer)]
    base = renderer.base

    @router.post("/turns/{turn_id}/label")
    def label(
        turn_id: int, who: Who, db: DB, value: Annotated[str, Form()] = "", hint: Annotated[str, Form()] = ""
    ) -> Response:
        number = _label_value(value)
        try:
            lab = queries.add_label(db, turn_id, value=number, hint=hint, author=who.author)
        except KeyError:
            raise ReviewError(404, f"No turn {turn_id}.") from None
        db.commit()
        session_id = lab.turn.session_id
        return RedirectResponse(
            f"{base}/sessions/{session_id}?labeled={turn_id}#turn-{turn_id}", status_code=303
        )

    @router.post("/adapters/{version_id}/promote")
    def promote(version_id: int, who: Who, db: DB) -> Response:
        promote_version(db, version_id)
        return RedirectResponse(f"{base}/adapters?done=promoted+v{version_id}", status_code=303)

    @router.post("/adapters/rollback")
    def rollback(who: Who, db: DB) -> Response:
        target = rollback_version(db)
        now = f"v{target}" if target is not None else "the+base+model"
        return RedirectResponse(f"{base}/adapters?done=rolled+back:+now+serving+{now}", status_code=303)


def _label_value(raw: str) -> int:
    text = raw.strip().replace("+", "")
    if text not in ("-1", "0", "1"):
        raise ReviewError(
            422, f"A label must be -1, 0 or +1, got {raw!r}.", param="value", code="invalid_value"
        )
    return int(text)


def _safe_next(target: str, base: str) -> str:
    """Only redirect inside the review UI after login (no open redirect to another site)."""
    return target if target.startswith(base) and not target.startswith("//") else base


def _overview_charts(data: dict[str, Any]) -> dict[str, str]:
    days = data["turns_per_day"]
    dist = data["score_distribution"]
    return {
        "per_day": charts.bar_chart(
            [d["day"][5:] for d in days], [d["turns"] for d in days], label="Turns per day"
        ),
        "scores": charts.bar_chart(
            ["-1", "0", "+1", "not judged"],
            [dist["-1"], dist["0"], dist["1"], dist["none"]],
            label="Score distribution",
            colors=SCORE_COLORS,
            width=360,
        ),
        "reward": charts.line_chart(
            data["reward_by_version"],
            label="Moving average of reward per adapter version",
            width=1000,
            height=260,
            x_label=f"scored main turns, oldest → newest (window {queries.MOVING_AVERAGE_WINDOW})",
        ),
    }
