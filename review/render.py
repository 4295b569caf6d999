"""Jinja2 rendering for the review pages: the environment, its filters, and the error pages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from review.errors import ReviewError

TEMPLATES = Path(__file__).parent / "templates"


def content_text(content: Any) -> str:
    """A message's content as text: list parts are joined, non-text parts named in brackets."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                pieces.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                pieces.append(f"[{part.get('type', 'part')}]")
            else:
                pieces.append(str(part))
        return "\n".join(pieces)
    return json.dumps(content, ensure_ascii=False)


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def tool_arguments(raw: Any) -> str:
    """Tool-call arguments pretty-printed when they are JSON, verbatim when they are not."""
    if isinstance(raw, str):
        try:
            return pretty_json(json.loads(raw))
        except ValueError:
            return raw
    return pretty_json(raw)


def short_time(value: str | None) -> str:
    return value.replace("T", " ")[:19] if value else "—"


def signed(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:+d}" if isinstance(value, int) and value else str(value)


class Renderer:
    """Renders templates with the base path of the review UI and shared helpers."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))
        self.env.filters.update(
            content_text=content_text,
            pretty_json=pretty_json,
            tool_arguments=tool_arguments,
            short_time=short_time,
            signed=signed,
        )
        self.env.globals.update(base=self.base, urlencode=urlencode)

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(**context)
        return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})

    def error(self, request: Request, err: ReviewError) -> HTMLResponse:
        """401 shows the login form (coming back here afterwards); anything else an error page."""
        if err.status == 401:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            nxt = target if request.method == "GET" else self.base
            return self.page("login.html", status=401, message=err.message, next=nxt, logged_in=False)
        titles = {
            403: "Not allowed",
            404: "Not found",
            409: "Cannot do that",
            422: "Bad input",
            503: "Database unavailable",
        }
        response = self.page(
            "error.html",
            status=err.status,
            title=titles.get(err.status, "Error"),
            message=err.message,
            status_code=err.status,
            logged_in=err.status != 403,
        )
        if err.status == 503:
            response.headers["Retry-After"] = "5"
        return response
