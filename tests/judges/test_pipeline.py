"""`judges.pipeline.judge_turn`, the plain function behind the Celery task, on a real SQLite file.

The judge endpoint is the scripted OpenAI-compatible server of `conftest.py`, standing in for a
remote judge at the network edge. The reaction stage is off here except where it is the subject
(it has its own tests), so these tests pin down the votes, hints and lifecycle.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.models import Turn, TurnStatus, Vote
from core.settings import Settings
from judges.client import JudgeClient, JudgeUnavailable
from judges.pipeline import JudgeOutcome, judge_turn, reaction_for
from judges.prompts import load_template
from tests.judges.conftest import HINT, PRM_NO, PRM_YES, ScriptedJudge, add_turn, tool_call

OK_STATE = [{"role": "tool", "tool_call_id": "call_1", "content": "port: 8080"},
            {"role": "user", "content": "what about the host?"}]
ERROR_STATE = [{"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"error": "ENOENT: config.yml"})}]


@pytest.fixture
def judge_settings(settings: Settings, judge_server: ScriptedJudge) -> Settings:
    return settings.model_copy(update={"judge_url": judge_server.url, "judge_reaction": False})


@pytest.fixture
def client(judge_settings: Settings) -> Iterator[JudgeClient]:
    c = JudgeClient.from_settings(judge_settings)
    yield c
    c.close()


def votes_of(db: Session, turn_id: int, kind: str = "prm") -> list[Vote]:
    db.expire_all()
    return list(db.scalars(select(Vote).where(Vote.turn_id == turn_id, Vote.kind == kind).order_by(Vote.vote_index)))


def test_votes_are_stored_with_raw_text_model_template_and_latency(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    judge_server.prm = [PRM_YES, PRM_YES, "I am not sure."]
    turn_id = add_turn(db, next_state=OK_STATE, tool_calls=tool_call("read", '{"path": "config.yml"}'))
    outcome = judge_turn(session_factory, client, judge_settings, turn_id)
    assert (outcome.action, outcome.score, outcome.source) == ("judged", 1, "votes")
    votes = votes_of(db, turn_id)
    assert sorted(v.score for v in votes if v.score is not None) == [1, 1]
    assert [v.score for v in votes].count(None) == 1  # the unparseable vote is kept, as None
    template = load_template("prm")
    for v in votes:
        assert v.judge_model == judge_settings.judge_model_name
        assert (v.template_name, v.template_version) == ("prm", template.version)
        assert v.latency_ms > 0 and v.raw_text
    turn = db.get(Turn, turn_id)
    assert turn is not None and turn.status == TurnStatus.judged and turn.judge_status == "ok"
    # the judge saw the request, the tool call and the next state, and was told not to log the call
    prompt = judge_server.requests[0]["messages"][0]["content"]
    assert "Read config.yml" in prompt and "[tool call] read" in prompt and "port: 8080" in prompt
    assert judge_server.headers[0]["x-turn-type"] == "internal"
    assert judge_server.requests[0]["temperature"] == judge_settings.judge_temperature


def test_running_twice_is_a_no_op_and_a_forced_rerun_upserts(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    turn_id = add_turn(db, next_state=OK_STATE)
    judge_turn(session_factory, client, judge_settings, turn_id)
    first = [(v.id, v.vote_index, v.raw_text) for v in votes_of(db, turn_id)]
    assert judge_turn(session_factory, client, judge_settings, turn_id).action == "already"
    assert [(v.id, v.vote_index, v.raw_text) for v in votes_of(db, turn_id)] == first
    assert len(judge_server.requests) == judge_settings.judge_votes  # no new judge calls
    # a redelivery after a crash finds the turn back in `ready`: votes are overwritten, not added
    turn = db.get(Turn, turn_id)
    assert turn is not None
    turn.status = TurnStatus.ready
    db.commit()
    judge_server.prm = [PRM_NO]
    assert judge_turn(session_factory, client, judge_settings, turn_id).score == -1
    again = votes_of(db, turn_id)
    assert len(again) == judge_settings.judge_votes
    assert [v.id for v in again] == [v[0] for v in first] and {v.score for v in again} == {-1}


def test_tool_error_scores_by_signal_then_asks_for_hints(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    short = "\\boxed{1}\n[HINT_START]Read config.yaml.[HINT_END]"
    judge_server.hint = [HINT, short, "\\boxed{-1}"]
    turn_id = add_turn(db, next_state=ERROR_STATE, tool_calls=tool_call("read", '{"path": "config.yml"}'))
    outcome = judge_turn(session_factory, client, judge_settings, turn_id)
    assert (outcome.score, outcome.source) == (-1, "signal")
    assert {k for k in judge_server.kinds()} == {"hint"}  # no PRM votes spent on a signalled turn
    turn = db.get(Turn, turn_id)
    assert turn is not None and turn.status == TurnStatus.hinted and "ENOENT" in (turn.score_reason or "")
    assert turn.hint_source == "judge" and turn.hint is not None and turn.hint.startswith("The file is config.yaml")
    hints = votes_of(db, turn_id, "hint")
    assert len(hints) == 3 and sum(h.hint is not None for h in hints) == 2


def test_shortest_hint_selection(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    judge_server.hint = [HINT, "\\boxed{1}\n[HINT_START]Read config.yaml.[HINT_END]",
                         "\\boxed{1} [HINT_START]no[HINT_END]"]
    turn_id = add_turn(db, next_state=ERROR_STATE)
    shortest = judge_settings.model_copy(update={"hint_select": "shortest"})
    judge_turn(session_factory, client, shortest, turn_id)
    turn = db.get(Turn, turn_id)
    assert turn is not None and turn.hint == "Read config.yaml."  # "no" is under hint_min_chars


def test_correction_becomes_the_hint_when_the_judge_has_none(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    judge_server.prm = [PRM_NO]
    judge_server.hint = ["\\boxed{-1}", "nothing to add"]
    reply = "No, the port is in config.yaml under server.port"
    turn_id = add_turn(db, next_state=[{"role": "user", "content": reply}])
    outcome = judge_turn(session_factory, client, judge_settings, turn_id)
    assert (outcome.score, outcome.source, outcome.action) == (-1, "votes", "hinted")
    turn = db.get(Turn, turn_id)
    assert turn is not None and (turn.hint, turn.hint_source) == (reply, "correction")
    # with the setting off, the turn gets no hint and stays merely judged
    off = judge_settings.model_copy(update={"hint_from_correction": False})
    other = add_turn(db, next_state=[{"role": "user", "content": reply}])
    assert judge_turn(session_factory, client, off, other).action == "judged"


def test_split_votes_are_no_clear_mistake_and_ask_no_hint(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    judge_server.prm = [PRM_NO, PRM_NO, "garbled"]
    turn_id = add_turn(db, next_state=OK_STATE)
    assert judge_turn(session_factory, client, judge_settings, turn_id).score == -1
    assert "hint" in judge_server.kinds()  # all *valid* votes agree: a clear mistake
    judge_server.requests.clear()
    judge_server.prm = [PRM_NO, PRM_YES, PRM_NO]
    other = add_turn(db, next_state=OK_STATE)
    assert judge_turn(session_factory, client, judge_settings, other).score == -1
    assert "hint" not in judge_server.kinds()  # 2 of 3: negative, but not clear enough for a hint


def test_unparsed_votes_score_zero_with_status_unparsed(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    judge_server.prm = ["I think it is fine", "\\boxed{maybe}"]
    turn_id = add_turn(db, next_state=OK_STATE)
    outcome = judge_turn(session_factory, client, judge_settings, turn_id)
    turn = db.get(Turn, turn_id)
    assert outcome.score == 0 and turn is not None and turn.judge_status == "unparsed"
    assert all(v.score is None for v in votes_of(db, turn_id))


def test_endpoint_down_puts_the_turn_back_to_ready(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    judge_server.status = 503
    turn_id = add_turn(db, next_state=OK_STATE)
    with pytest.raises(JudgeUnavailable):
        judge_turn(session_factory, client, judge_settings, turn_id)
    db.expire_all()
    turn = db.get(Turn, turn_id)
    assert turn is not None and turn.status == TurnStatus.ready and turn.score is None
    judge_server.status = 200  # back up: the retry judges it
    assert judge_turn(session_factory, client, judge_settings, turn_id).action == "judged"


def test_unreachable_endpoint_is_retryable(
    db: Session, session_factory: sessionmaker[Session], judge_settings: Settings
) -> None:
    down = judge_settings.model_copy(update={"judge_url": "http://127.0.0.1:9/v1", "judge_timeout_s": 2.0})
    turn_id = add_turn(db, next_state=OK_STATE)
    c = JudgeClient.from_settings(down)
    try:
        with pytest.raises(JudgeUnavailable):
            judge_turn(session_factory, c, down, turn_id)
    finally:
        c.close()
    db.expire_all()
    assert db.get(Turn, turn_id).status == TurnStatus.ready  # type: ignore[union-attr]


def test_side_turns_and_turns_without_next_state_are_not_judged(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    side = add_turn(db, next_state=OK_STATE, turn_type="side")
    last = add_turn(db, next_state=None, status=TurnStatus.awaiting_next_state)
    assert judge_turn(session_factory, client, judge_settings, side).action == "skipped"
    assert judge_turn(session_factory, client, judge_settings, last).action == "no_next_state"
    assert judge_turn(session_factory, client, judge_settings, 10_000).action == "missing"
    db.expire_all()
    assert db.get(Turn, side).status == TurnStatus.skipped  # type: ignore[union-attr]
    assert db.get(Turn, last).status == TurnStatus.awaiting_next_state  # type: ignore[union-attr]
    assert judge_server.requests == []


def test_a_fresh_claim_is_respected_and_a_stale_one_taken_over(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
) -> None:
    turn_id = add_turn(db, next_state=OK_STATE)
    turn = db.get(Turn, turn_id)
    assert turn is not None
    from core.models import utcnow

    turn.status, turn.judged_at = TurnStatus.judging, utcnow()
    db.commit()
    assert judge_turn(session_factory, client, judge_settings, turn_id).action == "busy"
    assert judge_turn(session_factory, client, judge_settings, turn_id, stale_after_s=0).action == "judged"


def test_stages_can_be_switched_off(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    no_signals = judge_settings.model_copy(update={"judge_signals": False})
    turn_id = add_turn(db, next_state=ERROR_STATE)
    assert judge_turn(session_factory, client, no_signals, turn_id).source == "votes"
    nothing = judge_settings.model_copy(update={"judge_signals": False, "judge_llm_votes": False})
    other = add_turn(db, next_state=ERROR_STATE)
    outcome = judge_turn(session_factory, client, nothing, other)
    assert (outcome.score, outcome.source) == (0, "none")


def judge_reply(db: Session, factory: sessionmaker[Session], client: JudgeClient, settings: Settings,
                reply: str) -> tuple[JudgeOutcome, Turn]:
    """Judge a turn whose next state is the user's `reply`; the outcome and the stored turn."""
    turn_id = add_turn(db, next_state=[{"role": "user", "content": reply}])
    outcome = judge_turn(factory, client, settings, turn_id)
    turn = db.get(Turn, turn_id)
    assert turn is not None
    return outcome, turn


@pytest.mark.slow
def test_a_confident_correction_is_its_own_hint_and_costs_no_hint_votes(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    on = judge_settings.model_copy(update={"judge_reaction": True})
    reply = "That is wrong, the function still crashes on empty input. Fix it."
    outcome, turn = judge_reply(db, session_factory, client, on, reply)
    assert (outcome.score, outcome.source, outcome.action) == (-1, "reaction", "hinted")
    assert (turn.hint, turn.hint_source) == (reply, "instruction")  # it says what to do: "Fix it."
    assert judge_server.kinds() == []  # neither PRM nor hint votes were asked for
    # the judge can still be asked to rephrase corrections into hints
    judge_server.hint = [HINT]
    asked = on.model_copy(update={"hint_votes_on_correction": True})
    judge_reply(db, session_factory, client, asked, reply)
    assert judge_server.kinds() == ["hint"] * asked.judge_votes


@pytest.mark.slow
def test_a_correction_hint_leaves_out_the_request_to_try_again(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    on = judge_settings.model_copy(update={"judge_reaction": True})
    said = "That is wrong, the function still crashes on empty input."
    outcome, turn = judge_reply(db, session_factory, client, on, f"{said} Give it another go.")
    assert (outcome.score, outcome.source, outcome.action) == (-1, "reaction", "hinted")
    assert (turn.hint, turn.hint_source) == (said, "correction")
    assert judge_server.kinds() == []
    kept = on.model_copy(update={"hint_drop_retry": False})
    whole = f"{said} Give it another go."
    assert judge_reply(db, session_factory, client, kept, whole)[1].hint == whole
    # a reply that only asks again carries nothing for the teacher: the judge is asked for a hint
    judge_server.hint = [HINT]
    outcome, turn = judge_reply(db, session_factory, client, on, "Wrong. Please try again.")
    assert outcome.source == "reaction" and judge_server.kinds() == ["hint"] * on.judge_votes
    assert turn.hint_source == "judge"


@pytest.mark.slow
def test_a_correction_hint_keeps_the_instruction_and_leaves_out_the_complaint(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    on = judge_settings.model_copy(update={"judge_reaction": True})
    reply = "Way off, I can't use this in the report. Give me the total in euros. Try again."
    outcome, turn = judge_reply(db, session_factory, client, on, reply)
    assert (outcome.score, outcome.source, outcome.action) == (-1, "reaction", "hinted")
    assert (turn.hint, turn.hint_source) == ("Give me the total in euros.", "instruction")
    assert judge_server.kinds() == []
    whole = on.model_copy(update={"hint_instructions_only": False})
    assert judge_reply(db, session_factory, client, whole, reply)[1].hint == \
        "Way off, I can't use this in the report. Give me the total in euros."


@pytest.mark.slow
def test_a_correction_too_short_to_be_a_hint_still_asks_the_judge_for_one(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    on = judge_settings.model_copy(update={"judge_reaction": True, "hint_min_chars": 20})
    judge_server.hint = [HINT]
    outcome, turn = judge_reply(db, session_factory, client, on, "No, wrong.")  # under hint_min_chars
    assert (outcome.score, outcome.source, outcome.action) == (-1, "reaction", "hinted")
    assert judge_server.kinds() == ["hint"] * on.judge_votes
    assert turn.hint_source == "judge"


@pytest.mark.slow
def test_a_reply_that_reads_as_approval_never_becomes_a_hint(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    on = judge_settings.model_copy(update={"judge_reaction": True})
    reply = "ok I guess that's fine"
    reading = reaction_for(on)
    assert reading is not None
    assert (reading.classify(reply).score, reading.classify(reply).label) == (None, 1)  # leans approval, unsure
    # the votes (wrongly) call it a clear mistake and offer no hint: the user's approval is no hint either
    judge_server.prm = [PRM_NO]
    judge_server.hint = ["\\boxed{-1}"]
    outcome, turn = judge_reply(db, session_factory, client, on, reply)
    assert (outcome.score, outcome.source, outcome.action) == (-1, "votes", "judged")
    assert turn.hint is None


def _seeds_of_a_rerun(db: Session, session_factory: sessionmaker[Session], settings: Settings,
                     judge_server: ScriptedJudge, turn_id: int) -> list[int]:
    """The `seed` of each judge request when the turn is judged again (back in `ready`, as after a crash)."""
    db.expire_all()
    turn = db.get(Turn, turn_id)
    assert turn is not None
    turn.status = TurnStatus.ready
    db.commit()
    judge_server.requests.clear()
    client = JudgeClient.from_settings(settings)
    try:
        judge_turn(session_factory, client, settings, turn_id)
    finally:
        client.close()
    assert judge_server.requests
    return sorted(body["seed"] for body in judge_server.requests)


def test_with_a_judge_seed_each_vote_sends_its_own_seed_and_a_rerun_sends_the_same(
    db: Session, session_factory: sessionmaker[Session], client: JudgeClient, judge_settings: Settings,
    judge_server: ScriptedJudge,
) -> None:
    """`seed` is the OpenAI chat completions request field; the embedded engine samples a seeded request
    with its own generator (tests/proxy/test_engine_embedded.py), so seeded votes repeat."""
    turn_id = add_turn(db, next_state=OK_STATE)
    judge_turn(session_factory, client, judge_settings, turn_id)
    assert judge_server.requests and all("seed" not in body for body in judge_server.requests)  # unseeded

    seeded = judge_settings.model_copy(update={"judge_seed": 7})
    first = _seeds_of_a_rerun(db, session_factory, seeded, judge_server, turn_id)
    assert len(set(first)) == seeded.judge_votes  # one seed per vote
    assert _seeds_of_a_rerun(db, session_factory, seeded, judge_server, turn_id) == first
    other = judge_settings.model_copy(update={"judge_seed": 8})
    assert not set(first) & set(_seeds_of_a_rerun(db, session_factory, other, judge_server, turn_id))
