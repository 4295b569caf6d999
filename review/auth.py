"""Who may review: the admin token, from a login cookie or an `Authorization: Bearer` header.

Review is never open by default. With no admin token configured every request is refused with a
message saying to set `LEARNPROXY_ADMIN_TOKEN`. A client API key is a valid credential for the
proxy but not for review, hence 403 (known, not allowed) rather than 401 (unknown).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from fastapi import Request

from core.settings import Settings
from review.errors import ReviewError

COOKIE_NAME = "learnproxy_review"
AUTHOR_COOKIE = "learnproxy_review_author"
COOKIE_MAX_AGE_S = 7 * 24 * 3600
NOT_CONFIGURED = "Review is disabled: set LEARNPROXY_ADMIN_TOKEN to enable /review and its API."
_AUTHOR_RE = re.compile(r"[^\w .@+-]")


@dataclass(frozen=True)
class Reviewer:
    """The authenticated admin; `author` is the name written on the labels they set."""

    author: str


def cookie_value(settings: Settings) -> str:
    """The session cookie: an HMAC of the admin token, so the token itself never sits in a cookie
    and rotating the token logs every browser out."""
    token = settings.admin_token or ""
    return hmac.new(token.encode(), b"learnproxy-review-cookie-v1", hashlib.sha256).hexdigest()


def clean_author(name: str | None) -> str:
    """A short printable reviewer name; `admin` when none was given."""
    cleaned = _AUTHOR_RE.sub("", (name or "").strip())[:64].strip()
    return cleaned or "admin"


def check_token(settings: Settings, token: str | None) -> None:
    """Raise the right `ReviewError` unless `token` is the admin token."""
    if not settings.admin_token:
        raise ReviewError(403, NOT_CONFIGURED, type="permission_error", code="admin_token_not_set")
    if not token:
        raise ReviewError(
            401,
            "Authentication required: log in, or send Authorization: Bearer <admin token>.",
            type="authentication_error",
            code="missing_credentials",
        )
    if hmac.compare_digest(token.encode(), settings.admin_token.encode()):
        return
    if any(hmac.compare_digest(token.encode(), key.encode()) for key in settings.api_keys):
        raise ReviewError(
            403,
            "This is a client API key; review needs the admin token.",
            type="permission_error",
            code="not_admin",
        )
    raise ReviewError(401, "Invalid admin token.", type="authentication_error", code="invalid_credentials")


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def authenticate(request: Request, settings: Settings) -> Reviewer:
    """A bearer header wins over the cookie; either must carry the admin token."""
    token = bearer_token(request)
    if token is not None:
        check_token(settings, token)
        return Reviewer(author=clean_author(request.headers.get("x-review-author")))
    if not settings.admin_token:
        check_token(settings, None)
    cookie = request.cookies.get(COOKIE_NAME)
    if cookie and hmac.compare_digest(cookie.encode(), cookie_value(settings).encode()):
        return Reviewer(author=clean_author(request.cookies.get(AUTHOR_COOKIE)))
    if cookie:
        raise ReviewError(
            401,
            "Your review session has expired: log in again.",
            type="authentication_error",
            code="invalid_credentials",
        )
    check_token(settings, None)
    raise AssertionError("unreachable: check_token(None) always raises")
