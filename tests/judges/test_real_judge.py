"""The default judge for real: SmolLM2-135M-Instruct answering the shipped PRM prompt.

The model is served by `bench.judge_server`: learnproxy's own proxy on the embedded engine, the default
judge as deployed; what is tested is the judge side: prompts that fit, raw
text stored, every vote parsed or kept as None, and a verdict recorded.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.models import Turn, TurnStatus, Vote
from core.settings import Settings
from judges.client import JudgeClient
from judges.pipeline import judge_turn
from judges.prm import parse_score
from tests.judges.conftest import add_turn

pytestmark = pytest.mark.slow


def test_smollm2_judges_a_turn_end_to_end(
    settings: Settings, db: Session, session_factory: sessionmaker[Session], model_path: str
) -> None:
    from bench.judge_server import LocalJudgeServer

    real = settings.model_copy(update={"model": model_path, "judge_max_tokens": 32, "judge_votes": 2,
                                       "judge_timeout_s": 600.0, "judge_reaction": False})
    turn_id = add_turn(db, request="What is 17 * 3?", response_text="17 * 3 = 41.",
                       next_state=[{"role": "user", "content": "that's not right, 17 * 3 is 51"}])
    with LocalJudgeServer(real) as server:
        judge = real.model_copy(update={"judge_url": server.url})
        client = JudgeClient.from_settings(judge)
        try:
            outcome = judge_turn(session_factory, client, judge, turn_id)
        finally:
            client.close()
    votes = list(db.scalars(select(Vote).where(Vote.turn_id == turn_id, Vote.kind == "prm")))
    assert len(votes) == judge.judge_votes
    for vote in votes:
        assert vote.raw_text.strip()  # the model's own words, unedited
        assert vote.score == parse_score(vote.raw_text)
    db.expire_all()
    turn = db.get(Turn, turn_id)
    assert turn is not None and turn.status in (TurnStatus.judged, TurnStatus.hinted)
    assert turn.score_source == "votes" and outcome.score == turn.score
    assert turn.judge_status in ("ok", "unparsed")
