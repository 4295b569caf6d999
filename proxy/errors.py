"""One exception tree for the OpenAI surface and one mapping to the OpenAI error shape and status.

    ProxyError                      OpenAI error body {"error": {"message","type","param","code"}}
    ├── InvalidRequest              400 invalid_request_error (param names the offending field)
    │   └── ContextLengthError      400 invalid_request_error, code context_length_exceeded
    ├── AuthenticationError         401 invalid_api_key
    ├── PermissionDenied            403 permission_denied (open proxy, non-loopback client)
    ├── ModelNotFound               404 model_not_found
    ├── BodyTooLarge                413 request_too_large
    ├── ServiceUnavailable          503 with Retry-After (engine not loaded, unreachable, overloaded)
    ├── GatewayTimeout              504 (engine did not answer in time)
    └── InternalError               500, a fixed message: nothing internal reaches the client

`to_proxy_error` turns any exception (engine errors included) into a `ProxyError`; the handlers
installed by `install_error_handlers` render it. Pydantic validation errors become 400s, never
FastAPI's default 422 body.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from proxy.engines.base import ContextLengthExceeded, EngineError, EngineTimeout, EngineUnavailable

log = logging.getLogger(__name__)

# Pydantic puts union members and validator names into an error's location; they are not fields.
_TYPE_TAG = re.compile(r"^(str|int|float|bool|none|dict\[.*|list\[.*|function-.*|literal\[.*|[A-Z].*)$")


class ProxyError(Exception):
    """An error the client sees. `message` is written for clients: never put internals in it."""

    status: int = 500
    type: str = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def headers(self) -> dict[str, str]:
        return {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class ContextLengthError(InvalidRequest):
    code = "context_length_exceeded"


class AuthenticationError(ProxyError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class PermissionDenied(ProxyError):
    status = 403
    type = "invalid_request_error"
    code = "permission_denied"


class ModelNotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(f"The model `{model}` does not exist.", param="model")


class BodyTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request body is larger than the limit of {limit} bytes.")


class ServiceUnavailable(ProxyError):
    status = 503
    type = "server_error"
    code = "engine_unavailable"

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, round(self.retry_after_s)))}


class GatewayTimeout(ProxyError):
    status = 504
    type = "server_error"
    code = "engine_timeout"


class InternalError(ProxyError):
    status = 500
    type = "server_error"
    code = "internal_error"

    def __init__(self) -> None:
        super().__init__("The server had an error while processing your request.")


def to_proxy_error(exc: BaseException) -> ProxyError:
    """The client-facing error for any exception; unknown ones are logged here with their trace."""
    if isinstance(exc, ProxyError):
        return exc
    if isinstance(exc, ContextLengthExceeded):
        return ContextLengthError(str(exc), param="messages")
    if isinstance(exc, EngineUnavailable):
        log.warning("engine unavailable: %s", exc)
        return ServiceUnavailable("The model is not available right now; retry later.", exc.retry_after_s)
    if isinstance(exc, EngineTimeout):
        log.warning("engine timeout: %s", exc)
        return GatewayTimeout("The model did not answer in time.")
    if isinstance(exc, EngineError):
        log.error("engine error: %s", exc)
        return InternalError()
    log.error("unhandled error", exc_info=exc)
    return InternalError()


def error_response(err: ProxyError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers())


def _param(error: Any) -> str | None:
    loc = [str(p) for p in error.get("loc", ()) if p != "body"]
    return ".".join(p for p in loc if not _TYPE_TAG.match(p)) or None


def from_validation_errors(errors: list[Any]) -> InvalidRequest:
    """A pydantic error as an OpenAI 400, with `param` as a dotted path into the body."""
    if not errors:
        return InvalidRequest("Invalid request.")
    if any(e.get("type") == "json_invalid" for e in errors):
        return InvalidRequest("We could not parse the JSON body of your request.")
    # A union reports every member's failure; the deepest location is the most telling one.
    first = max(errors, key=lambda e: len((_param(e) or "").split(".")))
    param = _param(first)
    where = f" at '{param}'" if param else ""
    return InvalidRequest(f"Invalid request{where}: {first.get('msg', 'invalid value')}", param=param)


def install_error_handlers(app: FastAPI) -> None:
    """Render every error raised in a route as the OpenAI error shape."""

    async def proxy_error(_: Request, exc: Exception) -> JSONResponse:
        return error_response(to_proxy_error(exc))

    async def validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError | ValidationError)
        return error_response(from_validation_errors(list(exc.errors())))

    async def http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        message = exc.detail if isinstance(exc.detail, str) and exc.status_code < 500 else "Server error."
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    app.add_exception_handler(ProxyError, proxy_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(ValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, proxy_error)
