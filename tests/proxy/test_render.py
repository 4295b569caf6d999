"""Prompt rendering with SmolLM2's real tokenizer (ChatML, no tool support: the Hermes fallback)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.modelload import load_tokenizer
from proxy.render import flatten_content, render_prompt, template_supports_tools
from proxy.serving_chat import Detokenizer, StopMatcher

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def tokenizer(model_path: str) -> Any:
    return load_tokenizer(model_path)


def test_smollm2_template_has_no_tool_support(tokenizer: Any) -> None:
    assert not template_supports_tools(tokenizer)


def test_plain_chat_renders_chatml_and_ids_match_text(tokenizer: Any) -> None:
    out = render_prompt(
        tokenizer, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    )
    assert (
        out.text
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert out.input_ids == tokenizer.encode(out.text, add_special_tokens=False)
    assert tokenizer.decode(out.input_ids) == out.text


def test_list_content_is_flattened(tokenizer: Any) -> None:
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    assert flatten_content(parts) == "first\nsecond"
    out = render_prompt(tokenizer, [{"role": "user", "content": parts}])
    assert "<|im_start|>user\nfirst\nsecond<|im_end|>" in out.text


def test_openclaw_tool_round_trip_renders_in_hermes_form(tokenizer: Any) -> None:
    """An assistant message with content null + tool_calls, then tool messages with no `name`."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call2", "content": [{"type": "text", "text": "rainy"}]},
    ]
    text = render_prompt(tokenizer, messages, TOOLS).text
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nYou are an agent.\n\n# Tools")
    assert json.dumps(TOOLS[0]) in system and "<tools>" in system
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert f"<|im_start|>assistant\n{call}\n" in text
    # Parallel tool results share one user turn, in order.
    assert (
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrainy\n</tool_response><|im_end|>"
        in text
    )
    assert text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    ("required", "forced", "note"),
    [
        (False, None, None),
        (True, None, "You must call at least one"),
        (False, "get_weather", "`get_weather`"),
    ],
)
def test_tool_choice_is_stated(tokenizer: Any, required: bool, forced: str | None, note: str | None) -> None:
    text = render_prompt(
        tokenizer, [{"role": "user", "content": "hi"}], TOOLS, required=required, forced=forced
    ).text
    assert text.startswith("<|im_start|>system\n# Tools")  # no system message: one is added
    if note is None:
        assert "You must call" not in text
    else:
        assert note in text


def test_no_tools_offered_means_no_tool_prompt(tokenizer: Any) -> None:
    text = render_prompt(tokenizer, [{"role": "user", "content": "hi"}], []).text
    assert "<tools>" not in text


def test_detokenizer_never_splits_a_multibyte_char(tokenizer: Any) -> None:
    text = "héllo 世界 🙂 ok"
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = Detokenizer(tokenizer, tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False))
    pieces = [detok.step([i]) for i in ids]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    assert sum(1 for p in pieces if p) > 3  # it really streams


@pytest.mark.parametrize(
    ("stops", "pieces", "out", "stopped"),
    [
        (["END"], ["abc E", "N", "D more"], "abc ", True),
        (["END"], ["abc E", "x"], "abc Ex", False),
        (["\n\n", "###"], ["one\n", "\ntwo"], "one", True),
        ([], ["a", "b"], "ab", False),
    ],
)
def test_stop_strings(stops: list[str], pieces: list[str], out: str, stopped: bool) -> None:
    matcher = StopMatcher(stops)
    got, hit = "", False
    for p in pieces:
        text, hit = matcher.feed(p)
        got += text
        if hit:
            break
    if not hit:
        got += matcher.flush()
    assert (got, hit) == (out, stopped)
