"""The tool-use scenario: a weather tool whose arguments must follow a rule, executed by the simulator.

The rule: `date` in ISO form `YYYY-MM-DD` and `units` one of the enum values. A wrong call gets a
JSON error result (`{"error": ...}`), which is what a real tool would return and what the judge's
deterministic signal stage reads.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from typing import Any

TOOL_NAME = "get_weather"
UNITS = ("celsius", "fahrenheit")
ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Weather forecast for a city on one day.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "date": {"type": "string", "description": "The day, as YYYY-MM-DD"},
                "units": {"type": "string", "enum": list(UNITS)},
            },
            "required": ["city", "date", "units"],
        },
    },
}


@dataclass(frozen=True)
class CallCheck:
    """The verdict on one tool call: valid against the rule, and correct for the request."""

    valid: bool
    correct: bool
    error: str | None  # the message the tool returns when the call is invalid


def parse_arguments(raw: str | dict[str, Any] | None) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "")
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _date_error(value: Any) -> str | None:
    if not isinstance(value, str) or not ISO_DATE.match(value):
        return f"invalid date {value!r}: expected YYYY-MM-DD"
    try:
        date.fromisoformat(value)
    except ValueError:
        return f"invalid date {value!r}: no such day"
    return None


def check_call(
    name: str | None, raw_arguments: str | dict[str, Any] | None, expected: dict[str, str]
) -> CallCheck:
    """Validate a call against the tool's rule, and compare it with what the request asked for."""
    if name != TOOL_NAME:
        return CallCheck(False, False, f"unknown tool {name!r}")
    args = parse_arguments(raw_arguments)
    if args is None:
        return CallCheck(False, False, "arguments are not a JSON object")
    city = args.get("city")
    if not isinstance(city, str) or not city.strip():
        return CallCheck(False, False, "missing required argument 'city'")
    error = _date_error(args.get("date"))
    if error is None and args.get("units") not in UNITS:
        error = f"invalid units {args.get('units')!r}: expected one of {', '.join(UNITS)}"
    if error is not None:
        return CallCheck(False, False, error)
    correct = (
        city.strip().lower() == expected["city"].lower()
        and args["date"] == expected["date"]
        and args["units"] == expected["units"]
    )
    return CallCheck(True, correct, None)


def execute(check: CallCheck, raw_arguments: str | dict[str, Any] | None) -> str:
    """The tool's JSON result: an error for an invalid call, a deterministic forecast otherwise."""
    if not check.valid:
        return json.dumps({"error": check.error})
    args = parse_arguments(raw_arguments) or {}
    seed = sum(map(ord, f"{args.get('city')}{args.get('date')}"))
    celsius = 5 + seed % 22
    temp = celsius if args.get("units") == "celsius" else round(celsius * 9 / 5 + 32)
    sky = ("sunny", "cloudy", "light rain", "windy")[seed % 4]
    return json.dumps({"city": args.get("city"), "date": args.get("date"), "temperature": temp,
                       "units": args.get("units"), "conditions": sky})
