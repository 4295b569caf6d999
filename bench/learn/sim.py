"""The simulated users at work: training sessions through the proxy, and held-out evaluation.

Everything goes through the official `openai` client. Training turns are ordinary main turns in
sessions named by `X-Session-Id`; the last user reaction of a session is sent with
`X-Session-Done: true` and one token, so every assistant reply that matters gets a next state.
Evaluation turns are sent with `X-Turn-Type: side`, at temperature 0, so they are never trained on.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from openai import OpenAI

from bench.learn import tools
from bench.learn.quality import SAYS_NOTHING, QualityGuard
from bench.learn.users import TOOL_FAILED, TOOL_MISSING, Prompt, User, follow_up, thanks

SEEDS = 2**31  # each training request's sampling seed is drawn from its session's rng, below this
REQUEST_TIMEOUT_S = 300.0  # one CPU completion, queued behind others, on a 2-core machine
MAX_TOOL_TURNS = 4
EVAL_CONCURRENCY = 8  # the embedded engine's default batch size


@dataclass
class Truth:
    """The ground truth for one training turn, kept by the simulator to grade the judge later."""

    session_id: str
    ordinal: int  # the assistant turn's position in its session, from 0
    user: str
    good: bool
    reason: str  # "ok", the first violation's code, or the guard's reason
    response_text: str
    tool_call: bool = False  # the turn was a tool call; its text is a summary, not the raw reply


@dataclass
class SessionLog:
    truths: list[Truth] = field(default_factory=list)

    def as_json(self) -> list[dict[str, Any]]:
        return [asdict(t) for t in self.truths]


@dataclass(frozen=True)
class Chat:
    """A thin wrapper over the openai client with the proxy's session headers."""

    client: OpenAI
    model: str
    max_tokens: int
    temperature: float

    def send(self, messages: list[dict[str, Any]], *, session: str, side: bool = False, done: bool = False,
             tools_: list[dict[str, Any]] | None = None, max_tokens: int | None = None,
             model: str | None = None, temperature: float | None = None, seed: int | None = None) -> Any:
        headers = {"X-Session-Id": session}
        if side:
            headers["X-Turn-Type"] = "side"
        if done:
            headers["X-Session-Done"] = "true"
        extra: dict[str, Any] = {"tools": tools_} if tools_ else {}
        if seed is not None:  # the engine samples a seeded request alone: a rerun gets the same reply
            extra["seed"] = seed
        resp = self.client.chat.completions.create(
            model=model or self.model, messages=messages,  # type: ignore[arg-type]
            max_tokens=max_tokens or self.max_tokens,
            temperature=self.temperature if temperature is None else temperature,
            extra_headers=headers, timeout=REQUEST_TIMEOUT_S, **extra,
        )
        return resp.choices[0]  # the choice: its message and its finish_reason


def cycle(prompts: tuple[Prompt, ...], rng: random.Random) -> Iterator[Prompt]:
    """The training pool in a seeded order, reshuffled on each pass."""
    while True:
        order = list(prompts)
        rng.shuffle(order)
        yield from order


# --- text users ---------------------------------------------------------------------------------


def rule_codes(user: User, question: str, reply: str, *, truncated: bool) -> list[str]:
    """The user's rule violations; a reply cut off at the token limit is too long for every user."""
    assert user.check is not None
    codes = [v.code for v in user.check(question, reply)]
    return codes or (["too_long"] if truncated else [])


def grade_text(user: User, guard: QualityGuard, question: str, reply: str, *,
               truncated: bool = False) -> tuple[bool, str]:
    """(satisfied, reason): the guard first, then the user's hidden rule. A reply the guard fails for
    saying nothing is `unanswered` (the user asks for the answer), any other failure `irrelevant`."""
    verdict = guard.check(question, reply)
    if not verdict.passed:
        return False, "unanswered" if verdict.reason in SAYS_NOTHING else "irrelevant"
    codes = rule_codes(user, question, reply, truncated=truncated)
    return (not codes), (codes[0] if codes else "ok")


def text_session(chat: Chat, user: User, pool: Iterator[Prompt], guard: QualityGuard,
                 rng: random.Random) -> list[Truth]:
    """One 2-4 turn session: thanks plus a new question when satisfied, a correction and redo when not."""
    sid = f"bench-{user.name}-{uuid.uuid4().hex[:12]}"
    n_turns = rng.randint(2, 4)
    question = next(pool).text
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    truths: list[Truth] = []
    for ordinal in range(n_turns):
        choice = chat.send(messages, session=sid, seed=rng.randrange(SEEDS))
        reply = choice.message.content or ""
        good, reason = grade_text(user, guard, question, reply, truncated=choice.finish_reason == "length")
        truths.append(Truth(sid, ordinal, user.name, good, reason, reply))
        reaction = thanks(rng) if good else user.correction(reason, rng)
        last = ordinal == n_turns - 1
        next_question = None if last else (next(pool).text if good else question)
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": follow_up(reaction, next_question, rng, satisfied=good)}]
        question = next_question or question
    chat.send(messages, session=sid, done=True, max_tokens=1)
    return truths


# --- the tool-use user --------------------------------------------------------------------------


def _calls(message: Any) -> list[tuple[str, str | None, str]]:
    return [(c.id, c.function.name, c.function.arguments) for c in (message.tool_calls or [])]


def tool_session(chat: Chat, user: User, pool: Iterator[Prompt], rng: random.Random) -> list[Truth]:
    """A request the agent should answer with a valid get_weather call; the simulator runs the tool."""
    sid = f"bench-{user.name}-{uuid.uuid4().hex[:12]}"
    prompt = next(pool)
    assert prompt.expected is not None
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt.text}]
    truths: list[Truth] = []
    succeeded = failed = False
    for ordinal in range(MAX_TOOL_TURNS):
        message = chat.send(messages, session=sid, tools_=user.tools, seed=rng.randrange(SEEDS)).message
        calls = _calls(message)
        if calls:
            checks = [tools.check_call(name, args, prompt.expected) for _, name, args in calls]
            ok = all(c.valid for c in checks)
            succeeded, failed = succeeded or ok, failed or not ok
            truths.append(Truth(sid, ordinal, user.name, ok, "ok" if ok else "tool_error",
                                f"{message.content or ''}{calls}", tool_call=True))
            messages.append({"role": "assistant", "content": message.content or None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in calls]})
            messages += [{"role": "tool", "tool_call_id": cid, "content": tools.execute(check, args)}
                         for (cid, _, args), check in zip(calls, checks, strict=True)]
            if ordinal == MAX_TOOL_TURNS - 1:
                break
            continue
        text = message.content or ""
        good = succeeded
        reason = "ok" if good else ("tool_error" if failed else "no_call")
        truths.append(Truth(sid, ordinal, user.name, good, reason, text))
        messages.append({"role": "assistant", "content": text})
        if good or ordinal >= MAX_TOOL_TURNS - 2:
            reaction = thanks(rng) if good else rng.choice(TOOL_FAILED if failed else TOOL_MISSING)
            messages.append({"role": "user", "content": reaction})
            break
        messages.append({"role": "user", "content": rng.choice(TOOL_FAILED if failed else TOOL_MISSING)})
    chat.send(messages, session=sid, done=True, max_tokens=1, tools_=user.tools)
    return truths


def session(
    chat: Chat, user: User, pool: Iterator[Prompt], guard: QualityGuard, rng: random.Random
) -> list[Truth]:
    if user.tools:
        return tool_session(chat, user, pool, rng)
    return text_session(chat, user, pool, guard, rng)


# --- held-out evaluation ------------------------------------------------------------------------


def with_hint(prompt: str, hint: str) -> str:
    """The prompt as the hinted teacher sees it (OpenClaw-RL's hint suffix on the last user message)."""
    return f"{prompt}\n\n[user's hint / instruction]\n{hint}"


def eval_chunks(prompts: tuple[Prompt, ...]) -> list[tuple[Prompt, ...]]:
    """The held-out prompts in the groups `evaluate` sends together, one engine batch each."""
    return [prompts[start:start + EVAL_CONCURRENCY] for start in range(0, len(prompts), EVAL_CONCURRENCY)]


def evaluate(chat: Chat, user: User, prompts: tuple[Prompt, ...], guard: QualityGuard, *, model: str,
             hinted: bool = False) -> dict[str, Any]:
    """Greedy side-turn replies to the held-out prompts, graded by the user's rule behind the guard."""
    def ask(p: Prompt) -> Any:
        text = with_hint(p.text, user.hint) if hinted else p.text
        return chat.send([{"role": "user", "content": text}], session=f"eval-{uuid.uuid4().hex[:12]}",
                         side=True, done=True, tools_=user.tools, model=model, temperature=0.0)

    # Concurrent requests let the engine batch them. Greedy replies depend on what shares the batch
    # (a row decoded with 7 others differs from the same row decoded alone), so the prompts go in
    # fixed chunks of one batch each, the next chunk only when the last is done: the same prompts
    # then meet the same batch every time. Grading stays in this thread.
    choices: list[Any] = []
    with ThreadPoolExecutor(max_workers=EVAL_CONCURRENCY) as pool:
        for chunk in eval_chunks(prompts):
            choices += pool.map(ask, chunk)
    rows = [_grade_eval(user, guard, p, c) for p, c in zip(prompts, choices, strict=True)]
    n = max(len(rows), 1)
    out: dict[str, Any] = {**summarize(rows), "samples": rows[:3]}
    if user.tools:
        out["valid_first_call_rate"] = out["satisfaction"]
        out["correct_first_call_rate"] = sum(r.get("correct", False) for r in rows) / n
    return out


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rates over graded replies (`grade_reply` rows, or tool-call rows with the same keys)."""
    n = max(len(rows), 1)
    return {
        "n": len(rows),
        "satisfaction": sum(r["satisfied"] for r in rows) / n,
        "guard_rate": sum(r["guard"] for r in rows) / n,
        "rule_rate": sum(r["rule"] for r in rows) / n,  # the rule alone, guard or not
        "mean_words": sum(len(r["reply"].split()) for r in rows) / n,  # shortening shows here first
    }


def grade_reply(user: User, guard: QualityGuard, question: str, reply: str, *, truncated: bool) -> dict[str, Any]:
    """One prose reply to a held-out question: the guard, the user's rule, and both together."""
    passed = guard.check(question, reply).passed
    rule_ok = not rule_codes(user, question, reply, truncated=truncated)
    return {"satisfied": passed and rule_ok, "guard": passed, "rule": rule_ok, "reply": reply}


def _grade_eval(user: User, guard: QualityGuard, prompt: Prompt, choice: Any) -> dict[str, Any]:
    message = choice.message
    if user.tools:
        calls = _calls(message)
        assert prompt.expected is not None
        check = tools.check_call(calls[0][1], calls[0][2], prompt.expected) if calls else None
        valid = bool(check and check.valid)
        # The guard is about prose answers; a tool call is graded by the tool's own rule.
        return {"satisfied": valid, "guard": True, "rule": valid, "correct": bool(check and check.correct),
                "reply": str(calls[0][1:]) if calls else (message.content or "")[:200]}
    return grade_reply(user, guard, prompt.text, message.content or "", truncated=choice.finish_reason == "length")
