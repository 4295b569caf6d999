"""Chat messages and tools rendered into prompt token ids with the model's own chat template.

The proxy renders the prompt itself ("token in, token out") so that the logged prompt ids are
exactly what the engine saw. List content is flattened to text. If the template takes `tools`,
they are passed to it; otherwise (SmolLM2's ChatML template has no tool support) the tools are
described in the system prompt in the Hermes form, assistant tool calls are written back as
`<tool_call>` blocks and tool results as `<tool_response>` blocks in a user turn, as Qwen does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

HERMES_TOOLS_PROMPT = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)
REQUIRED_NOTE = "\n\nYou must call at least one of these functions in your reply."
FORCED_NOTE = "\n\nYou must call the function `{name}` in your reply."


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    input_ids: list[int]


def template_supports_tools(tokenizer: Any) -> bool:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return isinstance(template, str) and "tools" in template


def flatten_content(content: Any) -> str:
    """OpenAI content (a string, a list of text parts, or null) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))


def _arguments(raw: Any) -> dict[str, Any] | str:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return str(raw)
    return parsed if isinstance(parsed, dict) else str(raw)


def _hermes_call(call: dict[str, Any]) -> str:
    fn = call.get("function", {})
    body = {"name": fn.get("name", ""), "arguments": _arguments(fn.get("arguments", ""))}
    return f"<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>"


def tool_instructions(tools: list[dict[str, Any]], *, required: bool, forced: str | None) -> str:
    text = HERMES_TOOLS_PROMPT.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
    if forced:
        return text + FORCED_NOTE.format(name=forced)
    return text + REQUIRED_NOTE if required else text


def hermes_messages(messages: list[dict[str, Any]], tool_prompt: str | None) -> list[dict[str, str]]:
    """Messages for a template without tool support: every content a string, tools in the text."""
    out: list[dict[str, str]] = []
    for msg in messages:
        role = "system" if msg["role"] == "developer" else msg["role"]
        text = flatten_content(msg.get("content"))
        if role == "assistant" and msg.get("tool_calls"):
            calls = "\n".join(_hermes_call(c) for c in msg["tool_calls"])
            text = f"{text}\n{calls}" if text else calls
        elif role in ("tool", "function"):
            block = f"<tool_response>\n{text}\n</tool_response>"
            if out and out[-1].get("_tool_results") == "1":
                out[-1]["content"] += "\n" + block  # parallel results share one user turn
                continue
            out.append({"role": "user", "content": block, "_tool_results": "1"})
            continue
        out.append({"role": role, "content": text})
    for msg in out:
        msg.pop("_tool_results", None)
    if tool_prompt:
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{tool_prompt}"
        else:
            out.insert(0, {"role": "system", "content": tool_prompt})
    return out


def native_messages(messages: list[dict[str, Any]], note: str | None) -> list[dict[str, Any]]:
    """Messages for a template that renders tools itself: text content, arguments as objects."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        item: dict[str, Any] = {"role": msg["role"], "content": flatten_content(msg.get("content"))}
        if msg.get("tool_calls"):
            item["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "type": "function",
                    "function": {
                        "name": c.get("function", {}).get("name", ""),
                        "arguments": _arguments(c.get("function", {}).get("arguments", "")),
                    },
                }
                for c in msg["tool_calls"]
            ]
        for key in ("tool_call_id", "name"):
            if msg.get(key) is not None:
                item[key] = msg[key]
        out.append(item)
    if note:
        if out and out[0]["role"] in ("system", "developer"):
            out[0]["content"] = f"{out[0]['content']}{note}"
        else:
            out.insert(0, {"role": "system", "content": note.strip()})
    return out


def render_prompt(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    *,
    required: bool = False,
    forced: str | None = None,
) -> RenderedPrompt:
    """The generation prompt for `messages` and the offered `tools` (empty: none offered)."""
    kwargs: dict[str, Any] = {}
    if tools and template_supports_tools(tokenizer):
        note = FORCED_NOTE.format(name=forced) if forced else (REQUIRED_NOTE if required else None)
        chat: list[dict[str, Any]] = native_messages(messages, note)
        kwargs["tools"] = tools
    else:
        prompt = tool_instructions(tools, required=required, forced=forced) if tools else None
        chat = list(hermes_messages(messages, prompt))
    text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True, **kwargs)
    ids = tokenizer.encode(text, add_special_tokens=False)
    return RenderedPrompt(text=text, input_ids=list(ids))
