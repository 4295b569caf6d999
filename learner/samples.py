"""Training samples from the feedback DB: judged or hinted main turns not yet trained on.

A sample keeps the turn's exact engine tokens (prompt ids, response ids, logged sampling
logprobs) and what the judges or a human said about it (score, hint). The teacher context for
hint distillation is re-rendered with the tokenizer's chat template; see `teacher_messages`.
"""

from __future__ import annotations

import bisect
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, exists, select
from sqlalchemy.orm import Session

from core.models import AdapterState, AdapterVersion, Label, Turn, TurnStatus
from core.settings import Settings
from core.turns import latest_label, view_of
from learner.config import TrainConfig
from learner.standing import missing_from, recurring, with_standing

HINT_HEADER = "\n\n[user's hint / instruction]\n"
JUDGED = (TurnStatus.judged, TurnStatus.hinted)
# a human label makes a turn trainable before (or without) the judge, but never a closed one
NOT_TRAINABLE = (TurnStatus.trained, TurnStatus.skipped, TurnStatus.failed)
PAGE = 256


@dataclass
class Sample:
    turn_id: int
    prompt_ids: list[int]
    response_ids: list[int]
    behavior_logprobs: list[float]
    score: int  # +1 / -1 for RL, 0 when the turn only carries a hint
    hint: str | None
    messages: list[dict[str, Any]] = field(repr=False)
    tools: list[dict[str, Any]] | None = field(repr=False, default=None)
    source: str = "judge"  # judge or label
    # where the hint came from: judge (hint votes), instruction (the user's correction, saying what
    # to do), correction (the user's complaint, saying only what was wrong) or label (a human)
    hint_source: str | None = None
    max_new_tokens: int | None = None  # the token budget the turn was served with
    # standing instructions (learner/standing.py) the hint does not say, put before it for the teacher
    standing: tuple[str, ...] = ()

    @property
    def is_rl(self) -> bool:
        return self.score != 0

    @property
    def is_opd(self) -> bool:
        return bool(self.hint)

    @property
    def says_what_to_do(self) -> bool:
        """The hint asks for something (or standing instructions do), not only that a reply was wrong."""
        return self.hint_source != "correction" or bool(self.standing)

    @property
    def teacher_hint(self) -> str:
        """What the hinted teacher is shown: the standing instructions, then the turn's own hint."""
        return with_standing(self.hint or "", self.standing)


@dataclass
class Collected:
    samples: list[Sample]
    n_stale: int = 0  # dropped: served more than max_staleness versions ago
    n_unusable: int = 0  # no tokens or logprobs logged, or nothing to learn for this method
    n_labelled: int = 0  # samples whose score/hint came from a human label


def _candidates(session: Session, labels_override: bool, limit: int, after_id: int) -> list[Turn]:
    judged: ColumnElement[bool] = Turn.status.in_([s.value for s in JUDGED])
    if labels_override:
        labelled = exists().where(Label.turn_id == Turn.id)
        judged = judged | (labelled & Turn.status.not_in([s.value for s in NOT_TRAINABLE]))
    stmt = (
        select(Turn)
        .where(Turn.turn_type == "main", Turn.trained_version_id.is_(None), Turn.id > after_id, judged)
        .order_by(Turn.id)
        .limit(limit)
    )
    return list(session.scalars(stmt))


def _published_ids(session: Session) -> list[int]:
    """Ids of versions that finished training, in order: staleness counts these."""
    done = [AdapterState.ready, AdapterState.published, AdapterState.retired, AdapterState.rolled_back]
    stmt = select(AdapterVersion.id).where(AdapterVersion.state.in_([s.value for s in done]))
    return sorted(session.scalars(stmt))


def staleness(version_ids: list[int], served_by: int | None) -> int:
    """How many finished versions were produced after the one that served the turn."""
    return len(version_ids) - bisect.bisect_right(version_ids, served_by or 0)


def _judgement(session: Session, turn: Turn, labels_override: bool) -> tuple[int, str | None, str, str | None]:
    """(score, hint, who scored it, where the hint came from)."""
    score, hint, source, hint_source = turn.score or 0, turn.hint, "judge", turn.hint_source
    if labels_override:
        label = latest_label(session, turn.id)
        if label is not None:
            score, source = label.value, "label"
            if label.hint:  # a label without a hint keeps the judge's hint
                hint, hint_source = label.hint, "label"
    return score, hint, source, hint_source


def _wanted(method: str, score: int, hint: str | None) -> bool:
    if method == "rl":
        return score != 0
    if method == "opd":
        return bool(hint)
    return score != 0 or bool(hint)


def collect_samples(
    session: Session, settings: Settings, config: TrainConfig, *, limit: int | None = None
) -> Collected:
    """Up to `limit` (default a batch) samples, oldest first; stale turns are marked skipped.

    The caller commits: marking stale turns is what keeps them from being counted twice.
    """
    want = limit or config.batch_size
    versions = _published_ids(session)
    out = Collected(samples=[])
    # page through candidates: turns this method cannot use stay behind and must not block the rest
    after_id = 0
    while len(out.samples) < want:
        page = _candidates(session, settings.labels_override, PAGE, after_id)
        for turn in page:
            if len(out.samples) >= want:
                break
            _consider(session, settings, config, versions, turn, out)
        if len(page) < PAGE:
            break
        after_id = page[-1].id
    return out


def add_standing(session: Session, config: TrainConfig, samples: list[Sample]) -> None:
    """Give each hinted sample the standing instructions (learner/standing.py) its hint does not say;
    nothing unless `config.standing_instructions` is set. Read once per trained batch, not on every
    readiness check."""
    if not (config.standing_instructions and any(s.hint for s in samples)):
        return
    standing = recurring(session, most=config.standing_instructions, min_sessions=config.standing_min_sessions,
                         window=config.standing_window)
    for sample in samples:
        if sample.hint:
            sample.standing = missing_from(sample.hint, standing)


def _consider(
    session: Session, settings: Settings, config: TrainConfig, versions: list[int], turn: Turn, out: Collected
) -> None:
    """Add `turn` to `out` as a sample, or count why not (marking it skipped when stale)."""
    age = staleness(versions, turn.adapter_version_id)
    if age > config.max_staleness:
        turn.status = TurnStatus.skipped
        turn.advantage = {"dropped": "stale", "staleness": age}
        out.n_stale += 1
        return
    sample = to_sample(session, settings, config, turn)
    if sample is None:
        out.n_unusable += 1
        return
    out.n_labelled += sample.source == "label"
    out.samples.append(sample)


def to_sample(session: Session, settings: Settings, config: TrainConfig, turn: Turn) -> Sample | None:
    """`turn` as a training sample for `config.method`, whatever its status; None when it has nothing
    this method can learn or lacks its logged tokens. scripts/batch_ablation.py retrains a finished
    run's batches with it."""
    score, hint, source, hint_source = _judgement(session, turn, settings.labels_override)
    if not _wanted(config.method, score, hint):  # decided before loading any token blobs
        return None
    view = view_of(session, turn)
    if not (
        view.prompt_token_ids
        and view.response_token_ids
        and len(view.response_logprobs) == len(view.response_token_ids)
    ):
        return None
    return Sample(
        turn_id=turn.id,
        prompt_ids=view.prompt_token_ids,
        response_ids=view.response_token_ids,
        behavior_logprobs=view.response_logprobs,
        score=score if config.method != "opd" else 0,
        hint=hint if config.method != "rl" else None,
        messages=view.messages,
        tools=view.tools,
        source=source,
        hint_source=hint_source if config.method != "rl" else None,
        max_new_tokens=(turn.params or {}).get("max_new_tokens"),
    )


def replay_rollouts(session: Session, limit: int) -> list[tuple[list[int], list[int]]]:
    """(student prompt ids, rollout ids) of the `limit` most recently learned teacher rollouts, newest
    first, from trained turns' advantage notes (each learned rollout keeps its token ids there)."""
    out: list[tuple[list[int], list[int]]] = []
    stmt = (select(Turn).where(Turn.trained_version_id.is_not(None), Turn.advantage.is_not(None))
            .order_by(Turn.id.desc()))
    for turn in session.scalars(stmt.execution_options(yield_per=PAGE)):
        learned = [n["ids"] for n in (turn.advantage or {}).get("rollouts", []) if n.get("learned") and n.get("ids")]
        if not learned:
            continue
        prompt = view_of(session, turn).prompt_token_ids
        for ids in learned:
            out.append((prompt, ids))
            if len(out) >= limit:
                return out
    return out


# --- teacher context ----------------------------------------------------------------------------


def _text(content: Any) -> str:
    """OpenAI content (a string or a list of parts) as plain text; non-text parts are dropped."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text"]
    return "\n".join(parts)


def _hermes(message: dict[str, Any]) -> dict[str, str]:
    """One message as {role, content} text. Tool calls and results use the Hermes tags, so any
    chat template renders them, tool-aware or not."""
    role = message.get("role", "user")
    text = _text(message.get("content"))
    if role == "assistant" and message.get("tool_calls"):
        calls = []
        for call in message["tool_calls"]:
            fn = call.get("function", {})
            args = fn.get("arguments", "{}")
            with contextlib.suppress(json.JSONDecodeError):  # else keep the raw string the model wrote
                args = json.loads(args) if isinstance(args, str) else args
            body = json.dumps({"name": fn.get("name"), "arguments": args})
            calls.append(f"<tool_call>\n{body}\n</tool_call>")
        text = "\n".join([text, *calls]) if text else "\n".join(calls)
    if role == "tool":
        return {"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"}
    if role == "developer":
        role = "system"
    return {"role": role, "content": text}


def assistant_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The text of every assistant message in a prompt (tool calls in their Hermes form)."""
    return [_hermes(m)["content"] for m in messages if m.get("role") == "assistant"]


def opening_request(messages: list[dict[str, Any]]) -> str:
    """The text of the prompt's first non-empty user message ("" when it has none)."""
    return next((text for m in messages if m.get("role") == "user" and (text := _hermes(m)["content"].strip())), "")


def teacher_messages(messages: list[dict[str, Any]], hint: str) -> list[dict[str, str]]:
    """The prompt with the hint appended to the last user message (or as a new user message)."""
    out = [_hermes(m) for m in messages]
    for i in range(len(out) - 1, -1, -1):
        if messages[i].get("role") == "user":
            out[i] = {"role": "user", "content": out[i]["content"] + HINT_HEADER + hint}
            return out
    out.append({"role": "user", "content": HINT_HEADER.lstrip("\n") + hint})
    return out


NEUTRAL_REQUEST = "Can you help me with something?"


def neutral_prompt_ids(tokenizer: Any, sample: Sample) -> list[int]:
    """Token ids of the sample's prompt with the conversation taken out: its system messages and
    tools, then one neutral request (`NEUTRAL_REQUEST`), ending with the assistant generation prompt.
    What the student writes here is what it writes whatever it is asked."""
    return asking_prompt_ids(tokenizer, sample.messages, sample.tools, NEUTRAL_REQUEST)


def asking_prompt_ids(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                      request: str) -> list[int]:
    """Token ids of a conversation's system messages and tools, then `request` as its only user
    message, ending with the assistant generation prompt."""
    kept = [_hermes(m) for m in messages if m.get("role") in ("system", "developer")]
    return _prompt_ids(tokenizer, [*kept, {"role": "user", "content": request}], tools)


def teacher_prompt_ids(tokenizer: Any, sample: Sample) -> list[int]:
    """Token ids of the hinted teacher context, ending with the assistant generation prompt."""
    if not sample.hint:
        raise ValueError(f"turn {sample.turn_id} has no hint")
    return _prompt_ids(tokenizer, teacher_messages(sample.messages, sample.teacher_hint), sample.tools)


def _prompt_ids(tokenizer: Any, messages: list[dict[str, str]], tools: list[dict[str, Any]] | None) -> list[int]:
    """Token ids of `messages` in the tokenizer's chat template, ending with the generation prompt."""
    kwargs: dict[str, Any] = {"tools": tools} if tools else {}
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
