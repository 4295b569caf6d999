"""Hints for clear mistakes: what the response should have done, drawn from the next state.

m samples of `hint_prompt.txt`; a sample counts when its last boxed value is 1 and it carries a
`[HINT_START]...[HINT_END]` span of at least `hint_min_chars`. The chosen hint is the longest valid
one (OpenClaw-RL's rule) or the shortest (`hint_select`). With no valid hint, the user's own
correcting words can serve (`hint_from_correction`), less their bare retry requests
(`hint_drop_retry`, judges/retry.py) and, where they hold an instruction, less the complaint before
it (`hint_instructions_only`, judges/instructions.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from core.settings import Settings
from judges.client import JudgeClient
from judges.instructions import has_instruction, instructions
from judges.prm import VoteResult, parse_score, sample_votes
from judges.prompts import JudgeInput, cut
from judges.retry import RetryFilter

HINT_TEMPLATE = "hint"
_HINT = re.compile(r"\[HINT_START\](.*?)\[HINT_END\]", re.DOTALL)


@dataclass(frozen=True)
class HintChoice:
    hint: str | None
    source: str | None  # judge; instruction (a correction that says what to do); correction (a complaint)


def parse_hint(raw: str, min_chars: int) -> str | None:
    """The last hint span of a sample whose last boxed value is 1, if long enough; else None."""
    if parse_score(raw) != 1:
        return None
    spans = _HINT.findall(raw)
    if not spans:
        return None
    hint = " ".join(spans[-1].split())
    return hint if len(hint) >= min_chars else None


def select_hint(candidates: Sequence[str | None], mode: str, min_chars: int) -> str | None:
    valid = [c for c in candidates if c is not None and len(c) >= min_chars]
    if not valid:
        return None
    return max(valid, key=len) if mode == "longest" else min(valid, key=len)


def hint_votes(client: JudgeClient, settings: Settings, inp: JudgeInput) -> list[VoteResult]:
    template, completions = sample_votes(client, settings, inp, HINT_TEMPLATE)
    return [
        VoteResult(
            i, c.text, parse_score(c.text), parse_hint(c.text, settings.hint_min_chars),
            c.model, template.name, template.version, c.latency_ms,
        )
        for i, c in enumerate(completions)
    ]


def correction_words(inp: JudgeInput, settings: Settings, retry: RetryFilter | None) -> str:
    """The user's reply as it would serve as a hint: cut to size; with a `retry` filter, without the
    sentences that only ask for another attempt ("" when none can serve); with
    `hint_instructions_only`, from its first instruction sentence on where it has one."""
    reply = cut((inp.user_reply or "").strip(), settings.judge_max_input_chars)
    if not (settings.hint_from_correction and reply):
        return ""
    words = retry.without_retries(reply) if retry is not None else reply
    return instructions(words) if settings.hint_instructions_only and words else words


def choose_hint(votes: Sequence[VoteResult], correction: str, settings: Settings, *,
                reply_may_correct: bool = True) -> HintChoice:
    """The judge's hint; failing that, the user's `correction_words`, unless the reply reads as
    approval or too little of it is left. A correction that says what to do is marked
    `instruction`, a bare complaint `correction` (the learner may write no rollouts for those)."""
    hint = select_hint([v.hint for v in votes], settings.hint_select, settings.hint_min_chars)
    if hint is not None:
        return HintChoice(hint, "judge")
    if reply_may_correct and len(correction) >= settings.hint_min_chars:
        return HintChoice(correction, "instruction" if has_instruction(correction) else "correction")
    return HintChoice(None, None)
