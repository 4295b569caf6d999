"""PRM votes: m samples of the judge model on `prm_prompt.txt`, each ending in `\\boxed{1|-1|0}`.

The score is the majority of the valid votes; a tie is 0, and no valid vote at all is 0 with the
status `unparsed`. A vote that cannot be parsed is `None`, never a silent 0.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from core.settings import Settings
from judges.client import Completion, JudgeClient
from judges.prompts import JudgeInput, PromptTemplate, load_template, prompt_values

PRM_TEMPLATE = "prm"
_BOXED = re.compile(r"\\boxed\s*\{")
_WRAPPERS = re.compile(r"\\(?:text|mathrm|mathbf|textbf)\s*\{([^{}]*)\}")
_VALUE = re.compile(r"^\(?\s*([+-]?)\s*([01])(?:\.0+)?\s*\)?$")


@dataclass(frozen=True)
class VoteResult:
    """One judge sample, as stored in `votes`."""

    index: int
    raw_text: str
    score: int | None
    hint: str | None
    judge_model: str
    template_name: str
    template_version: str
    latency_ms: float


def last_boxed(raw: str) -> str | None:
    """The content of the last `\\boxed{...}` (nested braces allowed), or None."""
    starts = [m.end() for m in _BOXED.finditer(raw)]
    if not starts:
        return None
    pos, depth = starts[-1], 1
    for i in range(pos, len(raw)):
        if raw[i] == "{":
            depth += 1
        elif raw[i] == "}":
            depth -= 1
            if depth == 0:
                return raw[pos:i]
    return None  # cut off before the closing brace


def parse_score(raw: str) -> int | None:
    """The last boxed value if it is 1, -1 or 0 (`+1`, `\\text{-1}`, `1.0` accepted); else None."""
    content = last_boxed(raw)
    if content is None:
        return None
    content = _WRAPPERS.sub(r"\1", content).replace("$", "").strip()
    match = _VALUE.match(content)
    if match is None:
        return None
    sign, digit = match.groups()
    value = int(digit)
    if sign == "-":
        value = -value
    return value


def majority(scores: Sequence[int | None]) -> tuple[int, str]:
    """(score, judge_status): the most common valid vote; a tie is 0; no valid vote is (0, unparsed)."""
    valid = [s for s in scores if s is not None]
    if not valid:
        return 0, "unparsed"
    counts = Counter(valid).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return 0, "ok"
    return counts[0][0], "ok"


def unanimous_negative(scores: Sequence[int | None]) -> bool:
    """True when at least one vote is valid and every valid vote is -1: a clear mistake."""
    valid = [s for s in scores if s is not None]
    return bool(valid) and all(s == -1 for s in valid)


def sample_votes(
    client: JudgeClient, settings: Settings, inp: JudgeInput, template_name: str
) -> tuple[PromptTemplate, list[Completion]]:
    """`settings.judge_votes` concurrent samples of one template; endpoint failures propagate."""
    template = load_template(template_name)
    prompt = template.render(**prompt_values(inp, settings.judge_max_input_chars))
    completions = client.complete_many(
        [{"role": "user", "content": prompt}],
        settings.judge_votes,
        temperature=settings.judge_temperature,
        max_tokens=settings.judge_max_tokens,
        seeds=None if settings.judge_seed is None else vote_seeds(settings.judge_seed, prompt, settings.judge_votes),
    )
    return template, completions


def vote_seeds(seed: int, prompt: str, n: int) -> list[int]:
    """The sampling seed of each of `n` votes on `prompt` (`settings.judge_seed`): the same for the same
    seed, prompt and index, so judging a turn again repeats its votes; distinct across votes and prompts."""
    return [int.from_bytes(hashlib.sha256(f"{seed}\n{i}\n{prompt}".encode()).digest()[:4], "big") >> 1
            for i in range(n)]


def prm_votes(client: JudgeClient, settings: Settings, inp: JudgeInput) -> list[VoteResult]:
    """`settings.judge_votes` concurrent votes; endpoint failures propagate (the task retries)."""
    template, completions = sample_votes(client, settings, inp, PRM_TEMPLATE)
    return [
        VoteResult(
            i, c.text, parse_score(c.text), None, c.model, template.name, template.version, c.latency_ms
        )
        for i, c in enumerate(completions)
    ]
