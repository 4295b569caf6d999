"""Hermes/Qwen tool-call parsing, whole and streamed, against a table of model outputs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.toolparse import StreamingToolParser, parse_tool_calls

WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TIME = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>'

# (case, model text, expected content, expected [(name, arguments)])
CASES: list[tuple[str, str, str | None, list[tuple[str, dict[str, Any]]]]] = [
    ("plain text", "Hello there!", "Hello there!", []),
    ("text keeps inner whitespace", "a\n\nb ", "a\n\nb ", []),
    ("one call", WEATHER, None, [("get_weather", {"city": "Paris"})]),
    (
        "parallel calls",
        WEATHER + "\n" + TIME,
        None,
        [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "UTC"})],
    ),
    ("text then call", "Let me check.\n" + WEATHER, "Let me check.", [("get_weather", {"city": "Paris"})]),
    ("no whitespace in tags", '<tool_call>{"name":"f","arguments":{}}</tool_call>', None, [("f", {})]),
    (
        "arguments as a string",
        '<tool_call>{"name":"f","arguments":"{\\"a\\": 1}"}</tool_call>',
        None,
        [("f", {"a": 1})],
    ),
    ("parameters key", '<tool_call>{"name":"f","parameters":{"a":2}}</tool_call>', None, [("f", {"a": 2})]),
    ("unclosed final call", '<tool_call>\n{"name": "f", "arguments": {"x": "y"}}', None, [("f", {"x": "y"})]),
    (
        "malformed json stays content",
        "<tool_call>{not json}</tool_call>",
        "<tool_call>{not json}</tool_call>",
        [],
    ),
    (
        "missing name stays content",
        '<tool_call>{"arguments": {}}</tool_call>',
        '<tool_call>{"arguments": {}}</tool_call>',
        [],
    ),
    ("unclosed garbage stays content", '<tool_call>{"name": ', '<tool_call>{"name": ', []),
    ("lookalike tag is text", "use <tool> or <tool_cal", "use <tool> or <tool_cal", []),
    (
        "unicode arguments",
        '<tool_call>{"name":"say","arguments":{"t":"héllo 世界"}}</tool_call>',
        None,
        [("say", {"t": "héllo 世界"})],
    ),
]


def _calls(calls: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize(("case", "text", "content", "calls"), CASES, ids=[c[0] for c in CASES])
def test_whole_text(
    case: str, text: str, content: str | None, calls: list[tuple[str, dict[str, Any]]]
) -> None:
    got_content, got_calls = parse_tool_calls(text)
    assert got_content == content
    assert _calls(got_calls) == calls
    for call in got_calls:
        assert call["id"].startswith("call_") and call["type"] == "function"
    assert len({c["id"] for c in got_calls}) == len(got_calls)


def _stream(text: str, size: int) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    parser = StreamingToolParser()
    content, deltas = "", []
    for i in range(0, len(text), size):
        piece, ds = parser.feed(text[i : i + size])
        content += piece
        deltas += [d.as_openai() for d in ds]
    piece, ds = parser.finish()
    deltas += [d.as_openai() for d in ds]
    return content + piece, deltas, parser.calls


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
@pytest.mark.parametrize(("case", "text", "content", "calls"), CASES, ids=[c[0] for c in CASES])
def test_streamed_in_pieces(
    case: str, text: str, content: str | None, calls: list[tuple[str, dict[str, Any]]], size: int
) -> None:
    got, deltas, final = _stream(text, size)
    assert got == (content or "")
    assert "<tool_call>" not in got or not calls  # markup never leaks next to a parsed call
    assert _calls(final) == calls
    # OpenAI delta shape: the first delta of an index carries id, type, name and arguments "".
    rebuilt: dict[int, dict[str, str]] = {}
    for d in deltas:
        if d["index"] not in rebuilt:
            assert d["id"].startswith("call_") and d["type"] == "function"
            assert d["function"]["arguments"] == "" and d["function"]["name"]
            rebuilt[d["index"]] = {"name": d["function"]["name"], "arguments": ""}
        else:
            assert "id" not in d and "name" not in d["function"]
            rebuilt[d["index"]]["arguments"] += d["function"]["arguments"]
    assert [(r["name"], json.loads(r["arguments"])) for _, r in sorted(rebuilt.items())] == calls


def test_parallel_false_keeps_only_the_first_call() -> None:
    parser = StreamingToolParser(parallel=False)
    parser.feed(WEATHER + "\n" + TIME)
    parser.finish()
    assert _calls(parser.calls) == [("get_weather", {"city": "Paris"})]
