"""Hermes/Qwen tool calls (`<tool_call>{json}</tool_call>`) parsed out of model text into OpenAI form.

One streaming parser serves both paths: text is fed in as it is decoded and comes out as content
pieces and tool-call deltas; a non-streaming reply is the same events concatenated. Tool markup
never reaches `content`: a call whose JSON does not parse stays in the content, verbatim.

A call is emitted when its closing tag arrives, as OpenAI streams it: a first delta for the index
with id, type, name and `arguments: ""`, then the arguments. Whitespace between or around calls is
dropped; whitespace inside content is kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from proxy.protocol import tool_call_id

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


@dataclass
class ToolCallDelta:
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""

    def as_openai(self) -> dict[str, Any]:
        function: dict[str, Any] = {"arguments": self.arguments}
        out: dict[str, Any] = {"index": self.index, "function": function}
        if self.id is not None:
            out["id"] = self.id
            out["type"] = "function"
            function["name"] = self.name
        return out


@dataclass
class ParsedCall:
    name: str
    arguments: str  # a JSON object, as a string, as OpenAI sends it


def parse_call(body: str) -> ParsedCall | None:
    """The call inside one `<tool_call>` block, or None when it is not a well-formed call."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)  # some models double-encode the arguments
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return ParsedCall(obj["name"], json.dumps(args, ensure_ascii=False))


@dataclass
class StreamingToolParser:
    """Feed decoded text; get content pieces and tool-call deltas back. Call `finish()` at the end."""

    parallel: bool = True
    calls: list[dict[str, Any]] = field(default_factory=list)
    _buf: str = ""  # text not yet emitted: a possible tag start, a call body, or held whitespace
    _in_call: bool = False

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        self._buf += text
        content: list[str] = []
        deltas: list[ToolCallDelta] = []
        while True:
            if self._in_call:
                end = self._buf.find(CLOSE)
                if end < 0:
                    break
                body, self._buf = self._buf[:end], self._buf[end + len(CLOSE) :]
                self._in_call = False
                self._close_call(body, CLOSE, content, deltas)
                continue
            start = self._buf.find(OPEN)
            if start < 0:
                # Hold back a possible tag start and trailing whitespace (it may precede a call).
                keep = _partial_suffix(self._buf, OPEN)
                ready = self._buf[: len(self._buf) - keep]
                shown = ready.rstrip()
                content.append(shown)
                self._buf = self._buf[len(shown) :]
                break
            content.append(self._buf[:start].rstrip())
            self._buf = self._buf[start + len(OPEN) :]
            self._in_call = True
        return "".join(content), deltas

    def finish(self) -> tuple[str, list[ToolCallDelta]]:
        """Flush at end of generation: an unclosed call is parsed if complete, else kept as text."""
        content: list[str] = []
        deltas: list[ToolCallDelta] = []
        buf, self._buf = self._buf, ""
        if self._in_call:
            self._in_call = False
            self._close_call(buf, "", content, deltas)
        elif buf and not (self.calls and not buf.strip()):
            content.append(buf)
        return "".join(content), deltas

    def _close_call(self, body: str, close: str, content: list[str], deltas: list[ToolCallDelta]) -> None:
        call = parse_call(body.strip())
        if call is None:
            content.append(OPEN + body + close)  # not a call after all: the model's text, verbatim
            return
        if self.calls and not self.parallel:
            return  # parallel_tool_calls=false: only the first call is returned
        index = len(self.calls)
        cid = tool_call_id()
        self.calls.append(
            {"id": cid, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        )
        deltas.append(ToolCallDelta(index=index, id=cid, name=call.name, arguments=""))
        deltas.append(ToolCallDelta(index=index, arguments=call.arguments))


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def parse_tool_calls(text: str, *, parallel: bool = True) -> tuple[str | None, list[dict[str, Any]]]:
    """Whole-text parse: (content, tool_calls). Content is None when only calls were produced."""
    parser = StreamingToolParser(parallel=parallel)
    head, _ = parser.feed(text)
    tail, _ = parser.finish()
    content = head + tail
    if parser.calls and not content.strip():
        return None, parser.calls
    return content, parser.calls

