"""Who may call the API: a bearer key from `settings.api_keys`, or, with no keys set, loopback only."""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import Request

from core.settings import Settings
from proxy.errors import AuthenticationError, PermissionDenied


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_access(settings: Settings, authorization: str | None, client_host: str | None) -> None:
    """Raise unless the caller may use the API."""
    if not settings.api_keys:
        if not is_loopback(client_host):
            raise PermissionDenied(
                "This proxy has no API keys set, so it only serves loopback clients. "
                "Set LEARNPROXY_API_KEYS to serve other hosts."
            )
        return
    scheme, _, key = (authorization or "").partition(" ")
    key = key.strip()
    # compare_digest on every key: the time taken says nothing about which key came close.
    matched = [hmac.compare_digest(key.encode(), k.encode()) for k in settings.api_keys]
    if scheme.lower() != "bearer" or not key or not any(matched):
        raise AuthenticationError("Incorrect API key provided.")


async def require_access(request: Request) -> None:
    """FastAPI dependency for the /v1 routes."""
    settings: Settings = request.app.state.settings
    client = request.client.host if request.client else None
    check_access(settings, request.headers.get("authorization"), client)
