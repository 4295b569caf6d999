"""The simulator's sessions and evaluation, against a fake OpenAI-compatible server at the HTTP edge.

The fake answers `POST /v1/chat/completions` in the documented OpenAI response shape
(https://platform.openai.com/docs/api-reference/chat/object): `choices[0].message` with `content`
and `tool_calls` (`id`, `type: function`, `function.name`, `function.arguments` as a JSON string),
`finish_reason`, and `usage`. It records every request so the tests can check what the simulated
user sent.
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import httpx2 as httpx
import pytest
from openai import OpenAI

from bench.learn.quality import Embedder, QualityGuard
from bench.learn.sim import (
    EVAL_CONCURRENCY,
    Chat,
    cycle,
    evaluate,
    grade_text,
    rule_codes,
    text_session,
    tool_session,
)
from bench.learn.users import ADVICE_UNANSWERED, CORRECTIONS, THANKS, all_users


class FakeServer:
    """Replies from a script, in order; records (headers, body) of every request."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script, self.requests = list(script), []  # type: ignore[var-annotated]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append((request.headers, body))
        message = self.script.pop(0) if body.get("max_tokens", 0) > 1 else {"content": "."}
        message = {"role": "assistant", "content": message.get("content"), **message}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return httpx.Response(200, json={
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def chat_for(fake: FakeServer) -> Chat:
    client = OpenAI(base_url="http://proxy.test/v1", api_key="x", max_retries=0,
                    http_client=httpx.Client(transport=httpx.MockTransport(fake)))
    return Chat(client, "learnproxy", max_tokens=48, temperature=0.8)


@pytest.fixture(scope="module")
def guard() -> QualityGuard:
    return QualityGuard(Embedder(), threshold=0.26)


def call(cid: str, args: dict[str, str]) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(args)}}


def test_text_session_corrects_then_thanks_and_closes(guard: QualityGuard) -> None:
    user = all_users()["student"]
    # A seed whose session has exactly two turns keeps the script short.
    seed = next(s for s in range(100) if random.Random(s).randint(2, 4) == 2)
    first_q = user.train[0].text
    fake = FakeServer([
        {"content": "Here is why:\n- the days get shorter\n- chlorophyll breaks down in the leaves"},
        {"content": "Leaves stop making chlorophyll as days shorten, so yellow and red pigments show."},
    ])
    truths = text_session(chat_for(fake), user, iter([user.train[0]] * 3), guard, random.Random(seed))
    assert [(t.ordinal, t.good, t.reason) for t in truths] == [(0, False, "list"), (1, True, "ok")]
    headers = [h for h, _ in fake.requests]
    assert len({h["x-session-id"] for h in headers}) == 1
    assert [h.get("x-session-done") for h in headers] == [None, None, "true"]
    second, closing = fake.requests[1][1], fake.requests[2][1]
    correction = second["messages"][-1]["content"]
    assert "list" in correction.lower() or "bullet" in correction.lower() or "numbered" in correction.lower()
    assert first_q not in correction  # a redo asks again without restating the question
    assert closing["max_tokens"] == 1 and closing["messages"][-1]["content"] in THANKS


def test_each_training_request_carries_a_seed_drawn_from_its_session_rng(guard: QualityGuard) -> None:
    """`seed` is the OpenAI chat completions request field; the same session rng sends the same seeds, so
    a rerun samples the same replies from the same weights."""
    user = all_users()["student"]
    seed = next(s for s in range(100) if random.Random(s).randint(2, 4) == 2)
    sent = []
    for _ in range(2):
        fake = FakeServer([{"content": "Leaves stop making chlorophyll as days shorten."}] * 2)
        text_session(chat_for(fake), user, iter([user.train[0]] * 3), guard, random.Random(seed))
        sent.append([body.get("seed") for _, body in fake.requests])
    assert sent[0] == sent[1]
    trained, closing = sent[0][:-1], sent[0][-1]
    assert len(trained) == 2 and all(isinstance(s, int) for s in trained) and trained[0] != trained[1]
    assert closing is None  # the closing request only ends the session


def test_tool_session_runs_the_tool_and_returns_errors() -> None:
    user = all_users()["weather"]
    prompt = user.train[0]
    assert prompt.expected is not None
    bad = {**prompt.expected, "date": "March 1"}
    fake = FakeServer([
        {"content": None, "tool_calls": [call("c1", bad)]},
        {"content": None, "tool_calls": [call("c2", prompt.expected)]},
        {"content": "It will be sunny."},
    ])
    truths = tool_session(chat_for(fake), user, cycle((prompt,), random.Random(0)), random.Random(0))
    assert [(t.good, t.reason, t.tool_call) for t in truths] == [
        (False, "tool_error", True), (True, "ok", True), (True, "ok", False)]
    second = fake.requests[1][1]["messages"]
    assert second[-1]["role"] == "tool" and "error" in json.loads(second[-1]["content"])
    third = fake.requests[2][1]["messages"]
    assert "temperature" in json.loads(third[-1]["content"])
    assert all(body.get("tools") for _, body in fake.requests)
    assert fake.requests[-1][0]["x-session-done"] == "true"


def test_evaluation_is_greedy_side_turns_graded_by_rule_and_guard(guard: QualityGuard) -> None:
    user = all_users()["brief"]
    prompts = user.heldout[:3]
    fake = FakeServer([
        {"content": "Wipe them with a drop of dish soap, then let them dry; the film stops the fog."},
        {"content": "🙂🙂🙂🙂🙂"},
        {"content": " ".join(["Use warm soapy water and dry with a soft cloth."] * 4)},
    ])
    out = evaluate(chat_for(fake), user, prompts, guard, model="learnproxy@v3")
    assert out["n"] == 3
    assert all(h["x-turn-type"] == "side" for h, _ in fake.requests)
    assert all(b["temperature"] == 0.0 and b["model"] == "learnproxy@v3" for _, b in fake.requests)
    # Requests run concurrently, so which reply meets which prompt is not fixed: check the totals.
    assert out["guard_rate"] < 1.0  # the emoji reply fails the guard whatever prompt it met
    assert out["satisfaction"] <= 1 / 3 + 1e-9  # only a short relevant reply can satisfy the user


def test_evaluation_sends_one_batch_of_prompts_at_a_time(guard: QualityGuard) -> None:
    """Greedy replies depend on what shares the engine's batch: each prompt must meet the same batch
    every time, so a chunk starts only once the one before it has been answered."""
    user = all_users()["advice"]
    prompts = user.heldout[:EVAL_CONCURRENCY + 3]
    done: list[str] = []
    started: list[tuple[str, int]] = []  # (prompt, replies finished when it was sent)
    lock = threading.Lock()

    class Timed(FakeServer):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            asked = json.loads(request.content)["messages"][-1]["content"]
            with lock:
                started.append((asked, len(done)))
            time.sleep(0.01)  # long enough for a request of the next chunk to overtake, were it sent
            response = super().__call__(request)
            with lock:
                done.append(asked)
            return response

    fake = Timed([{"content": "My advice: rest."}] * len(prompts))
    out = evaluate(chat_for(fake), user, prompts, guard, model="learnproxy")
    assert out["n"] == len(prompts)
    first = {p.text for p in prompts[:EVAL_CONCURRENCY]}
    assert {asked for asked, _ in started[:EVAL_CONCURRENCY]} == first
    assert all(finished == EVAL_CONCURRENCY for _, finished in started[EVAL_CONCURRENCY:])


def test_a_reply_cut_off_at_the_token_limit_is_too_long() -> None:
    student, bees = all_users()["student"], "What do bees make?"
    assert rule_codes(student, bees, "Bees turn nectar into honey.", truncated=False) == []
    cut = "Bees turn nectar into honey. They fan it until"
    assert rule_codes(student, bees, cut, truncated=True) == ["too_long"]
    assert rule_codes(student, bees, "- nectar\n- wings", truncated=True) == ["list"]  # the real fault first


def test_a_reply_that_says_nothing_is_asked_for_the_answer(guard: QualityGuard) -> None:
    """An on-topic remark in the user's form draws a request for the answer, not "off topic"."""
    user = all_users()["advice"]
    q = "How do I start knitting?"
    assert q in {p.text for p in user.heldout}
    remark = "My advice: The art of knitting is a lifelong pursuit that requires patience and dedication."
    answer = "My advice: Buy a pair of 5 mm needles and a ball of chunky wool, and learn the knit stitch first."
    off = "My advice: The quarterly report shows revenue grew by four percent in Europe last year."
    assert grade_text(user, guard, q, remark) == (False, "unanswered")
    assert grade_text(user, guard, q, answer) == (True, "ok")
    assert grade_text(user, guard, q, off) == (False, "irrelevant")
    # The user asks for the answer in their own form; a user with no such phrasing asks for it plainly.
    assert user.correction("unanswered", random.Random(0)) in ADVICE_UNANSWERED
    assert all_users()["brief"].correction("unanswered", random.Random(0)) in CORRECTIONS["unanswered"]
