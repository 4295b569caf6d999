"""Request models and response builders for the OpenAI chat completions API.

Lenient in, strict out: the request model accepts fields it does not know (they are recorded as
ignored), but what it does know is checked as strictly as OpenAI does. Responses are built as
plain dicts in exactly OpenAI's shapes, because they go out on every streamed token.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from proxy.errors import InvalidRequest, from_validation_errors

FUNCTION_NAME = r"^[a-zA-Z0-9_.\-]{1,64}$"


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextPart(_Open):
    type: Literal["text"]
    text: str


class FunctionCall(_Open):
    name: str
    arguments: str | dict[str, Any] = ""


class ToolCall(_Open):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _content_required(self) -> ChatMessage:
        # Only an assistant message that calls tools may omit its content.
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a '{self.role}' message needs 'content'")
        return self


class FunctionDef(_Open):
    name: Annotated[str, Field(pattern=FUNCTION_NAME)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _schema_is_object(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and value.get("type", "object") != "object":
            raise ValueError("function parameters must be a JSON Schema of type 'object'")
        return value


class ToolDef(_Open):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Open):
    name: str


class NamedToolChoice(_Open):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(_Open):
    include_usage: bool = False


class ChatCompletionRequest(_Open):
    """`POST /v1/chat/completions`. Fields not declared here land in `model_extra`."""

    model: str
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    stop: str | Annotated[list[str], Field(max_length=16)] | None = None
    seed: int | None = None
    n: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # Session evidence (see proxy.records.SessionHints); declared so they are not "ignored".
    user: str | None = None
    session_id: str | None = None
    prompt_cache_key: str | None = None

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        stops = [self.stop] if isinstance(self.stop, str) else self.stop
        return [s for s in stops if s]

    @property
    def max_new_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    def offered_tools(self) -> list[dict[str, Any]]:
        """The tools the model may call: none when `tool_choice` is "none"."""
        if not self.tools or self.tool_choice == "none":
            return []
        return [t.model_dump(exclude_none=True) for t in self.tools]

    def forced_tool(self) -> str | None:
        return self.tool_choice.function.name if isinstance(self.tool_choice, NamedToolChoice) else None


def parse_chat_request(payload: Any) -> ChatCompletionRequest:
    """Validate a decoded JSON body; every problem becomes a 400 with `param`."""
    if not isinstance(payload, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    try:
        req = ChatCompletionRequest.model_validate(payload)
    except ValidationError as exc:
        raise from_validation_errors(list(exc.errors())) from None
    if req.n not in (None, 1):
        raise InvalidRequest("Only n=1 is supported.", param="n")
    forced = req.forced_tool()
    if forced is not None and forced not in {t.function.name for t in req.tools or []}:
        raise InvalidRequest(f"tool_choice names an unknown function '{forced}'.", param="tool_choice")
    if req.tool_choice == "required" and not req.tools:
        raise InvalidRequest("tool_choice 'required' needs 'tools'.", param="tool_choice")
    return req


# --- responses ------------------------------------------------------------------------------


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion(
    *,
    id: str,
    model: str,
    created: int,
    content: str | None,
    tool_calls: list[dict[str, Any]] | None,
    finish_reason: str,
    usage: dict[str, int],
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": usage,
    }


def chunk(
    *,
    id: str,
    model: str,
    created: int,
    delta: dict[str, Any] | None,
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
    include_usage: bool = False,
) -> dict[str, Any]:
    """One stream chunk; `delta=None` is the trailing usage chunk with `choices: []`."""
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    )
    out: dict[str, Any] = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
    }
    if include_usage:
        out["usage"] = usage  # null on every chunk but the last, as OpenAI sends it
    return out


def now() -> int:
    return int(time.time())
