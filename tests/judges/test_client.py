"""The judge client streams each vote: a slow judge that keeps writing finishes, a stalled one times out.

The judge is the scripted OpenAI-compatible server of `conftest.py` (the network edge), streaming in
the documented chunk shape.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from judges.client import JudgeClient, JudgeTimeout, JudgeUnavailable
from tests.judges.conftest import PRM_YES, ScriptedJudge

MESSAGES = [{"role": "user", "content": "Was the turn good?"}]


@contextmanager
def _client(judge: ScriptedJudge, *, timeout_s: float, deadline_s: float = 60.0) -> Iterator[JudgeClient]:
    client = JudgeClient(judge.url, "judge-model", timeout_s=timeout_s, deadline_s=deadline_s)
    try:
        yield client
    finally:
        client.close()


def test_a_vote_is_streamed_and_joined(judge_server: ScriptedJudge) -> None:
    with _client(judge_server, timeout_s=10) as client:
        out = client.complete(MESSAGES, temperature=0.6, max_tokens=64)
    assert out.text == PRM_YES and out.model == "judge-model"
    assert judge_server.requests[-1]["stream"] is True


def test_a_slow_but_steady_judge_is_not_cut_off(judge_server: ScriptedJudge) -> None:
    """Longer in all than the timeout, never silent for that long: the vote completes."""
    judge_server.chunk_delay_s = 0.15  # PRM_YES has 14 words: about 2.1 s in all
    started = time.perf_counter()
    with _client(judge_server, timeout_s=1.0) as client:
        out = client.complete(MESSAGES, temperature=0.6, max_tokens=64)
    assert time.perf_counter() - started > 1.0
    assert out.text == PRM_YES


@pytest.mark.parametrize(("setup", "limits", "error", "match"), [
    ({"delay_s": 3.0}, {"timeout_s": 0.5}, JudgeTimeout, "wrote nothing"),  # silent judge
    ({"chunk_delay_s": 0.15}, {"timeout_s": 1.0, "deadline_s": 0.6}, JudgeTimeout, "did not finish"),
    ({"fail_mid_stream": True}, {"timeout_s": 5.0}, JudgeUnavailable, "mid-answer"),  # retryable
])
def test_a_stalled_endless_or_failing_vote_raises(
    judge_server: ScriptedJudge, setup: dict[str, Any], limits: dict[str, float], error: type[Exception],
    match: str,
) -> None:
    for name, value in setup.items():
        setattr(judge_server, name, value)
    with _client(judge_server, **limits) as client, pytest.raises(error, match=match):
        client.complete(MESSAGES, temperature=0.6, max_tokens=64)
