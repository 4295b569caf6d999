"""Turn filters shared by the review pages, the JSON API, the CLI and the export.

One `TurnFilters` value is parsed from query strings or CLI flags and applied to a `select(Turn)`,
so every surface filters the same way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, time
from typing import Any

from sqlalchemy import Select, exists, or_, select

from core.models import Label, Turn

SCORE_CHOICES = ("-1", "0", "1", "none")


class FilterError(ValueError):
    """A filter value that cannot be understood; `param` names the offending field."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def parse_when(value: str | None, *, param: str, end_of_day: bool = False) -> datetime | None:
    """An ISO date or datetime; a bare date means its start (or its end, for `until`). UTC if naive."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise FilterError(
            param, f"{param} must be an ISO date or datetime such as 2026-01-31, got {value!r}"
        ) from exc
    if len(text) == 10 and end_of_day:  # a bare date: include the whole day
        parsed = datetime.combine(parsed.date(), time.max)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _naive_utc(value: datetime) -> datetime:
    # SQLite stores DateTime(timezone=True) as naive UTC text; compare like with like there.
    return value.astimezone(UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class TurnFilters:
    """Which turns to show or export. Every field is optional; None means no constraint."""

    score: str | None = None  # "-1", "0", "1" or "none" (not judged)
    has_hint: bool | None = None
    score_source: str | None = None  # signal, reaction, votes, ...
    turn_type: str | None = None  # main or side
    adapter_version: str | None = None  # a version id, or "base" for turns served by the base model
    labeled: bool | None = None
    since: datetime | None = None
    until: datetime | None = None
    q: str | None = None  # text search: session id or response text

    @classmethod
    def parse(cls, **raw: Any) -> TurnFilters:
        """Build from loosely typed input (query strings, CLI flags), rejecting bad values clearly."""
        score = _blank_none(raw.get("score"))
        if score is not None and score not in SCORE_CHOICES:
            raise FilterError("score", f"score must be one of {', '.join(SCORE_CHOICES)}, got {score!r}")
        version = _blank_none(raw.get("adapter_version"))
        if version is not None and version != "base" and not version.isdigit():
            raise FilterError(
                "adapter_version", f"adapter_version must be a number or 'base', got {version!r}"
            )
        return cls(
            score=score,
            has_hint=_parse_bool(raw.get("has_hint"), "has_hint"),
            score_source=_blank_none(raw.get("score_source")),
            turn_type=_blank_none(raw.get("turn_type")),
            adapter_version=version,
            labeled=_parse_bool(raw.get("labeled"), "labeled"),
            since=parse_when(_blank_none(raw.get("since")), param="since"),
            until=parse_when(_blank_none(raw.get("until")), param="until", end_of_day=True),
            q=_blank_none(raw.get("q")),
        )

    def is_empty(self) -> bool:
        return all(v is None for v in asdict(self).values())

    def query_args(self) -> dict[str, str]:
        """The filters as query-string arguments (for pagination links)."""
        out: dict[str, str] = {}
        for key, value in asdict(self).items():
            if value is None:
                continue
            if isinstance(value, datetime):
                out[key] = value.isoformat()
            elif isinstance(value, bool):
                out[key] = "true" if value else "false"
            else:
                out[key] = str(value)
        return out

    def apply(self, stmt: Select[Any], *, dialect: str = "sqlite") -> Select[Any]:
        """Add WHERE clauses on `Turn` to a select that already selects from `turns`."""
        if self.score is not None:
            stmt = stmt.where(Turn.score.is_(None) if self.score == "none" else Turn.score == int(self.score))
        if self.has_hint is not None:
            stmt = stmt.where(Turn.hint.is_not(None) if self.has_hint else Turn.hint.is_(None))
        if self.score_source is not None:
            stmt = stmt.where(Turn.score_source == self.score_source)
        if self.turn_type is not None:
            stmt = stmt.where(Turn.turn_type == self.turn_type)
        if self.adapter_version is not None:
            stmt = stmt.where(
                Turn.adapter_version_id.is_(None)
                if self.adapter_version == "base"
                else Turn.adapter_version_id == int(self.adapter_version)
            )
        if self.labeled is not None:
            has_label = exists().where(Label.turn_id == Turn.id)
            stmt = stmt.where(has_label if self.labeled else ~has_label)
        for bound, op in ((self.since, "ge"), (self.until, "le")):
            if bound is not None:
                value = _naive_utc(bound) if dialect == "sqlite" else bound
                stmt = stmt.where(Turn.created_at >= value if op == "ge" else Turn.created_at <= value)
        if self.q is not None:
            pattern = f"%{self.q}%"
            stmt = stmt.where(or_(Turn.session_id.ilike(pattern), Turn.response_text.ilike(pattern)))
        return stmt


def matching_session_ids(filters: TurnFilters, *, dialect: str = "sqlite") -> Select[Any]:
    """A subquery of the ids of sessions with at least one turn matching `filters`."""
    return filters.apply(select(Turn.session_id), dialect=dialect).distinct()


def _blank_none(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _parse_bool(value: Any, param: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("", "any"):
        return None
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise FilterError(param, f"{param} must be true or false, got {value!r}")
