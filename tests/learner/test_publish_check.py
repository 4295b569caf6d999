"""The check before a new adapter version is served (learner/publish_check.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.models import AdapterState, AdapterVersion
from core.pointer import current_version_id, publish
from core.settings import Settings
from learner import publish_check
from learner.config import TrainConfig
from learner.publish_check import Reply
from learner.run import run_train_step
from tests.learner.factories import TurnMaker
from tests.learner.test_training import FAST, _add_scored

ANSWER = Reply("Water boils at 100 degrees Celsius at sea level.", 0.0, 0.62)


def _decide(new: list[Reply], base: list[Reply], slack: int = 0) -> publish_check.Verdict:
    return publish_check.decide(new, base, max_repeat=0.2, drop=0.2, slack=slack)


@pytest.mark.parametrize(("reply", "why"), [
    (Reply("Boils at 100.", 0.0, 0.6), "too_short"),
    (Reply('My advice: "My advice: "My advice: "My advice: "My advice: "', 0.6, 0.5), "loops"),
    (Reply("You're a helpful AI, designed to provide guidance and support.", 0.0, 0.12), "off_topic"),
    (Reply("At sea level water starts to boil at one hundred degrees.", 0.0, 0.45), None),  # within the drop
])
def test_a_reply_fails_when_short_looping_or_off_the_request(reply: Reply, why: str | None) -> None:
    assert publish_check.failure(reply, ANSWER, max_repeat=0.2, drop=0.2) == why


def test_a_version_is_held_to_the_base_models_failures_plus_slack() -> None:
    looping_base = Reply("one two three one two three one two three one two three", 0.7, 0.5)
    off = Reply("You're a helpful AI, designed to provide guidance and support.", 0.0, 0.12)
    # the base model loops on the second request too: failing there costs the version nothing
    even = _decide([ANSWER, off], [ANSWER, looping_base])
    assert (even.passed, even.failed, even.base_failed) == (True, 1, 1)
    worse = _decide([off, off], [ANSWER, looping_base])
    assert (worse.passed, worse.failed, worse.base_failed) == (False, 2, 1)
    assert _decide([off, off], [ANSWER, looping_base], slack=1).passed
    assert [r["failed"] for r in worse.rows] == ["off_topic", "off_topic"]
    assert [r["base_failed"] for r in worse.rows] == [None, "loops"]


def test_latest_requests_open_the_latest_sessions_once_each(db: Session, maker: TurnMaker) -> None:
    sky = maker.add(db, "Why is the sky blue?", "Rayleigh scattering.")  # the oldest session
    old = maker.add(db, "How do I boil an egg?", "Put it in boiling water for 8 minutes.")
    later = maker.add(db, "Softer, please.", "Six minutes.", messages=[
        {"role": "user", "content": "How do I boil an egg?"},
        {"role": "assistant", "content": "Put it in boiling water for 8 minutes."},
        {"role": "user", "content": "Softer, please."}])
    later.session_id, later.turn_index = old.session_id, 1  # the same session, one turn on
    side = maker.add(db, "How tall is Everest?", "8849 metres.")
    side.turn_type = "side"  # an evaluation or title request: not what users asked
    failed = maker.add(db, "What is rust?", "")
    failed.error = "engine timeout"
    asked = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a primary colour."}]
    maker.add(db, "Name a primary colour.", "Blue.", messages=asked)
    other = maker.add(db, "Name a primary colour.", "Red.", messages=asked)  # the same prompt, asked again
    db.commit()
    requests = publish_check.latest_requests(db, 5)
    # newest session first; a session's opening turn, not its latest; a prompt asked again counts once
    assert [r.turn_id for r in requests] == [other.id, old.id, sky.id]
    assert [r.opening for r in requests] == ["Name a primary colour.", "How do I boil an egg?", "Why is the sky blue?"]
    assert requests[0].prompt_ids == maker.prompt_ids(asked)
    assert [r.turn_id for r in publish_check.latest_requests(db, 2)] == [other.id, old.id]


def test_canary_prompts_are_read_from_the_shipped_file_and_none_is_a_benchmark_prompt(tmp_path: Path) -> None:
    shipped = publish_check.canary_prompts(100)
    assert len(shipped) == 16 and len(set(shipped)) == 16 and all(p.endswith("?") for p in shipped)
    assert publish_check.canary_prompts(3) == shipped[:3]
    # the check must not see the learning benchmark's prompts, held-out ones above all
    pools = Path(__file__).resolve().parents[2] / "bench" / "learn" / "data"
    rows = [json.loads(line) for f in pools.glob("*.jsonl") for line in f.open()]
    asked = {(row.get("prompt") or row["question"]).lower() for row in rows}
    assert len(asked) > 100 and not {p.lower() for p in shipped} & asked
    mine = tmp_path / "canary.txt"
    mine.write_text("# a comment\n\nHow do I tie a bowline?\n  Why is ice slippery?  \n")
    assert publish_check.canary_prompts(5, mine) == ["How do I tie a bowline?", "Why is ice slippery?"]


def test_canary_requests_are_asked_in_the_setting_of_the_latest_conversation(db: Session, maker: TurnMaker) -> None:
    bare = publish_check.canary_requests(db, maker.tokenizer, ["Why is ice slippery?"])  # nothing served yet
    assert bare == [publish_check.Request(None, maker.prompt_ids([{"role": "user", "content": "Why is ice slippery?"}]),
                                          "Why is ice slippery?", canary=True)]
    maker.add(db, "What is 2+2?", "4.", messages=[{"role": "system", "content": "You are terse."},
                                                  {"role": "user", "content": "What is 2+2?"}])
    pirate = [{"role": "system", "content": "Talk like a pirate."}, {"role": "user", "content": "Hi!"},
              {"role": "assistant", "content": "Ahoy!"}, {"role": "user", "content": "Where is the map?"}]
    maker.add(db, "Where is the map?", "In the chest.", messages=pirate)
    db.commit()
    requests = publish_check.canary_requests(db, maker.tokenizer, ["Why is ice slippery?", "How do I tie a bowline?"])
    # the newest conversation's system message, then the canary request alone: none of its turns
    assert [r.prompt_ids for r in requests] == [
        maker.prompt_ids([pirate[0], {"role": "user", "content": q}])
        for q in ("Why is ice slippery?", "How do I tie a bowline?")]
    assert [(r.turn_id, r.opening, r.canary) for r in requests] == [
        (None, "Why is ice slippery?", True), (None, "How do I tie a bowline?", True)]


def _trained_to_loop(settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker,
                     **check: int) -> AdapterVersion:
    """One version trained on turns judged +1 on a looping reply and -1 on real answers, at a rate far too
    high: its replies loop. The publish check looks at four requests, 24 tokens each."""
    loop = "yes yes yes yes yes yes yes yes yes yes yes yes yes yes yes yes"
    for question in ("What is 2+2?", "Name a primary colour.", "Why is the sky blue?", "How do magnets work?"):
        maker.add(db, question, loop, score=1)
        maker.add(db, question, "Let me explain it simply and clearly.", score=-1)
    db.commit()
    config = TrainConfig.from_settings(settings, method="rl", lr=3e-3, steps_per_batch=4, batch_size=8,
                                       publish_check_tokens=24, **{"publish_check": 4, **check})
    version = run_train_step(session_factory, settings, config=config)
    assert version is not None
    db.expire_all()
    return version


@pytest.mark.slow
def test_a_version_that_learned_to_loop_is_kept_but_never_served(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker
) -> None:
    version = _trained_to_loop(settings, session_factory, db, maker)
    row = db.get(AdapterVersion, version.id)
    assert row is not None and row.state == AdapterState.rejected
    assert current_version_id(db) is None  # the base model still serves
    verdict = row.metrics["publish_check"]
    assert not verdict["passed"] and verdict["failed"] > verdict["base_failed"]
    assert len(verdict["rows"]) == 4 and [r["failed"] for r in verdict["rows"]] == ["loops"] * 4
    assert len({r["base_reply"] for r in verdict["rows"]}) == 4  # four distinct requests
    assert not any(r["canary"] for r in verdict["rows"])
    assert json.loads((Path(row.path or "") / "metrics.json").read_text())["publish_check"] == verdict

    # the next version trains from what is served (the base model), not from the rejected weights
    _add_scored(db, maker)
    fine = TrainConfig.from_settings(settings, **FAST, publish_check=4, publish_check_tokens=24)
    second = run_train_step(session_factory, settings, config=fine)
    assert second is not None and second.parent_id is None
    db.expire_all()
    kept = db.get(AdapterVersion, second.id)
    assert kept is not None and kept.state == AdapterState.published and kept.metrics["publish_check"]["passed"]
    assert current_version_id(db) == second.id
    # a person may still serve the rejected version from the review page
    publish(db, version.id)
    db.commit()
    assert current_version_id(db) == version.id
    assert db.scalars(select(AdapterVersion.state).where(AdapterVersion.id == second.id)).one() == AdapterState.retired


@pytest.mark.slow
def test_a_failed_version_is_tried_at_half_its_step_until_one_passes(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker
) -> None:
    # checked on four canary requests alone: everyday questions the batch never trained on
    version = _trained_to_loop(settings, session_factory, db, maker, publish_check=0, publish_check_canary=4,
                               publish_check_tries=10)
    row = db.get(AdapterVersion, version.id)
    assert row is not None and row.state == AdapterState.published and current_version_id(db) == row.id
    verdict = row.metrics["publish_check"]
    assert [r["request"] for r in verdict["rows"]] == publish_check.canary_prompts(4)
    assert all(r["canary"] for r in verdict["rows"])
    tries = verdict["tries"]
    assert 1 < len(tries) < 10 and tries[0] == {"scale": 1.0, "failed": 4}  # the full step loops on all four
    assert [t["scale"] for t in tries] == [0.5 ** k for k in range(len(tries))]
    assert verdict["passed"] and verdict["scale"] == tries[-1]["scale"] and tries[-1]["failed"] == verdict["failed"]
    # the passing step loops no more often than the base model does at 24 tokens (it loops on some of them)
    loops = [sum(r[key] == "loops" for r in verdict["rows"]) for key in ("failed", "base_failed")]
    assert loops[0] <= loops[1] < 4
    # what is saved and served is the blended step: lora_B (zero in a fresh adapter) scaled down with it
    saved = load_file(str(Path(row.path or "") / "adapter_model.safetensors"))
    assert any(float(v.abs().max()) > 0 for k, v in saved.items() if "lora_B" in k)


@pytest.mark.slow
def test_a_version_trained_on_from_a_rejected_one_starts_and_blends_from_the_rejected_weights(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker
) -> None:
    rejected = _trained_to_loop(settings, session_factory, db, maker)
    assert rejected.state == AdapterState.rejected and rejected.path is not None
    _add_scored(db, maker)
    # a step far too small to move the weights: what is saved is where the learner started, blends included
    config = TrainConfig.from_settings(settings, lr=1e-12, steps_per_batch=1, publish_check=4, publish_check_tokens=24,
                                       publish_check_train_on=1, publish_check_tries=2)
    second = run_train_step(session_factory, settings, config=config)
    assert second is not None and second.parent_id == rejected.id
    db.expire_all()
    row = db.get(AdapterVersion, second.id)
    assert row is not None and row.path is not None
    # it loops as the weights it started from do: tried again half way back to them, and rejected
    assert row.state == AdapterState.rejected
    assert [t["scale"] for t in row.metrics["publish_check"]["tries"]] == [1.0, 0.5]
    start = load_file(str(Path(rejected.path) / "adapter_model.safetensors"))
    saved = load_file(str(Path(row.path) / "adapter_model.safetensors"))
    assert any(float(v.abs().max()) > 0.01 for k, v in start.items() if "lora_B" in k)  # not a fresh adapter
    # half way from a fresh adapter (lora_B zero) would halve every lora_B: the blend started from the rejected one
    assert saved.keys() == start.keys() and all(torch.allclose(saved[k], start[k], atol=1e-6) for k in start)
