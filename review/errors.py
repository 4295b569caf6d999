"""The review error tree and its one mapping to responses.

    ReviewError          a fault with a status and a message safe to show (401, 403, 404, 409, 422)
    FilterError          a query filter that cannot be understood (422)
    RequestValidationError (FastAPI)  a bad body or query parameter (422)
    SQLAlchemyError      the feedback DB failed or is unreachable (503, logged, details not shown)

The routes of the JSON API answer in the OpenAI error shape; the pages answer with an HTML error
page (or, for 401, the login form). Both are done by a route class, so the mapping works whatever
exception handlers the hosting app installs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy.exc import SQLAlchemyError

from review.filters import FilterError

log = logging.getLogger(__name__)

DB_DOWN = "The feedback database is unreachable right now. Check LEARNPROXY_DATABASE_URL and try again."


class ReviewError(Exception):
    """A client-visible fault: status, message and the OpenAI error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def validation_message(exc: RequestValidationError) -> ReviewError:
    """One readable sentence out of FastAPI's validation errors, naming the first bad field."""
    parts, param = [], None
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "form")]
        field = ".".join(loc) or "body"
        param = param or field
        parts.append(f"{field}: {err.get('msg', 'invalid value')}")
    return ReviewError(422, "; ".join(parts) or "Invalid request.", param=param, code="invalid_value")


def as_review_error(exc: Exception) -> ReviewError | None:
    """Map a known exception to a `ReviewError`; None for anything unexpected."""
    if isinstance(exc, ReviewError):
        return exc
    if isinstance(exc, FilterError):
        return ReviewError(422, str(exc), param=exc.param, code="invalid_filter")
    if isinstance(exc, RequestValidationError):
        return validation_message(exc)
    if isinstance(exc, SQLAlchemyError):
        log.error("review: database error: %s", exc.__class__.__name__, exc_info=exc)
        return ReviewError(503, DB_DOWN, type="service_unavailable", code="database_unavailable")
    return None


Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class ApiRoute(APIRoute):
    """A JSON API route: known faults become OpenAI-shaped error bodies."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                err = as_review_error(exc)
                if err is None:
                    raise
                headers = {"Retry-After": "5"} if err.status == 503 else None
                if err.status == 401:
                    headers = {"WWW-Authenticate": "Bearer"}
                return JSONResponse(err.body(), status_code=err.status, headers=headers)

        return guarded


def page_route_class(render_error: Callable[[Request, ReviewError], Response]) -> type[APIRoute]:
    """A page route class whose known faults are rendered by `render_error` as HTML."""

    class PageRoute(APIRoute):
        def get_route_handler(self) -> Handler:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                try:
                    return await handler(request)
                except Exception as exc:
                    err = as_review_error(exc)
                    if err is None:
                        raise
                    return render_error(request, err)

            return guarded

    return PageRoute
