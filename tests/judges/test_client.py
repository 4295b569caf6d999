"""The judge client streams each vote: a slow judge that keeps writing finishes, a stalled one times out.

The judge is the scripted OpenAI-compatible server of `conftest.py` (the network edge), streaming in
the documented chunk shape.
"""

from __future__ import annotations

import time

import pytest

from judges.client import JudgeClient, JudgeTimeout, JudgeUnavailable
from tests.judges.conftest import PRM_YES, ScriptedJudge

MESSAGES = [{"role": "user", "content": "Was the turn good?"}]


def _client(judge: ScriptedJudge, *, timeout_s: float, deadline_s: float = 60.0) -> JudgeClient:
    return JudgeClient(judge.url, "judge-model", timeout_s=timeout_s, deadline_s=deadline_s)


def test_a_vote_is_streamed_and_joined(judge_server: ScriptedJudge) -> None:
    client = _client(judge_server, timeout_s=10)
    try:
        out = client.complete(MESSAGES, temperature=0.6, max_tokens=64)
    finally:
        client.close()
    assert out.text == PRM_YES and out.model == "judge-model"
    assert judge_server.requests[-1]["stream"] is True


def test_a_slow_but_steady_judge_is_not_cut_off(judge_server: ScriptedJudge) -> None:
    """Longer in all than the timeout, never silent for that long: the vote completes."""
    judge_server.chunk_delay_s = 0.15  # PRM_YES has 14 words: about 2.1 s in all
    client = _client(judge_server, timeout_s=1.0)
    started = time.perf_counter()
    try:
        out = client.complete(MESSAGES, temperature=0.6, max_tokens=64)
    finally:
        client.close()
    assert time.perf_counter() - started > 1.0
    assert out.text == PRM_YES


def test_a_silent_judge_times_out(judge_server: ScriptedJudge) -> None:
    judge_server.delay_s = 3.0
    client = _client(judge_server, timeout_s=0.5)
    try:
        with pytest.raises(JudgeTimeout, match="wrote nothing"):
            client.complete(MESSAGES, temperature=0.6, max_tokens=64)
    finally:
        client.close()


def test_the_deadline_bounds_a_vote_that_never_ends(judge_server: ScriptedJudge) -> None:
    judge_server.chunk_delay_s = 0.15
    client = _client(judge_server, timeout_s=1.0, deadline_s=0.6)
    try:
        with pytest.raises(JudgeTimeout, match="did not finish"):
            client.complete(MESSAGES, temperature=0.6, max_tokens=64)
    finally:
        client.close()


def test_an_error_event_mid_stream_is_retryable(judge_server: ScriptedJudge) -> None:
    judge_server.fail_mid_stream = True
    client = _client(judge_server, timeout_s=5)
    try:
        with pytest.raises(JudgeUnavailable, match="mid-answer"):
            client.complete(MESSAGES, temperature=0.6, max_tokens=64)
    finally:
        client.close()
