"""The benchmark's waits on the run's feedback DB, read-only: for the judge before each held-out evaluation
and after the last session, and for training at the end."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sqlalchemy.orm import Session

from bench.learn.judging import rejected_versions, served_and_rolled_back, wait_for_judging, wait_for_training
from bench.learn.sim import Truth
from core import pointer
from core.models import AdapterState, AdapterVersion, ChatSession, Turn
from core.settings import Settings


def _db_path(settings: Settings) -> Path:
    return settings.data_dir / "learnproxy.db"


def test_returns_once_no_version_has_been_training_for_the_settle_time(db: Session, settings: Settings) -> None:
    db.add(AdapterVersion(name="v1-a", base_model="m", method="combined", state=AdapterState.published))
    db.commit()
    assert _db_path(settings).exists()
    started = time.monotonic()
    wait_for_training(_db_path(settings), timeout_s=30.0, settle_s=0.5)
    assert time.monotonic() - started < 5.0


def test_waits_for_a_version_in_training_to_finish(db: Session, settings: Settings) -> None:
    row = AdapterVersion(name="v1-b", base_model="m", method="combined", state=AdapterState.training)
    db.add(row)
    db.commit()

    def finish() -> None:
        time.sleep(2.0)
        row.state = AdapterState.published
        db.commit()

    finisher = threading.Thread(target=finish)
    started = time.monotonic()
    finisher.start()
    wait_for_training(_db_path(settings), timeout_s=30.0, settle_s=0.5)
    finisher.join()
    assert 2.0 <= time.monotonic() - started < 10.0


def test_gives_up_after_the_timeout(db: Session, settings: Settings) -> None:
    db.add(AdapterVersion(name="v1-c", base_model="m", method="combined", state=AdapterState.training))
    db.commit()
    started = time.monotonic()
    wait_for_training(_db_path(settings), timeout_s=1.5, settle_s=0.5)
    assert 1.5 <= time.monotonic() - started < 5.0


def test_reads_the_served_version_and_the_rolled_back_ones(db: Session, settings: Settings) -> None:
    assert served_and_rolled_back(_db_path(settings)) == (None, [])  # nothing served yet: the base model
    first = AdapterVersion(name="v1-c", base_model="m", method="combined", state=AdapterState.published)
    db.add(first)
    db.flush()
    second = AdapterVersion(name="v2-c", base_model="m", method="combined", state=AdapterState.rolled_back,
                            parent_id=first.id, metrics={"rollback": {"margin": 0.5}})
    db.add(second)
    db.flush()
    pointer.point_to(db, first.id)
    db.commit()
    assert served_and_rolled_back(_db_path(settings)) == (
        first.id, [{"version": second.id, "parent": first.id, "check": {"margin": 0.5}}])


def test_reads_the_versions_the_publish_check_rejected(db: Session, settings: Settings) -> None:
    check = {"passed": False, "failed": 3, "base_failed": 1, "slack": 1, "rows": [{}] * 8}
    db.add(AdapterVersion(name="v1-d", base_model="m", method="combined", state=AdapterState.published))
    db.add(AdapterVersion(name="v2-d", base_model="m", method="combined", state=AdapterState.rejected,
                          parent_id=None, metrics={"publish_check": check}))
    db.commit()
    rejected = rejected_versions(_db_path(settings))
    assert [(r["parent"], r["failed"], r["base_failed"], r["n"]) for r in rejected] == [(None, 3, 1, 8)]


def _turns(db: Session, scores: list[int | None]) -> list[Truth]:
    db.add(ChatSession(id="sim-1", source="header"))
    for i, score in enumerate(scores):
        db.add(Turn(session_id="sim-1", turn_index=i, request_id=f"r{i}", model="learnproxy", message_refs=[],
                    response_text=f"reply {i}", score=score))
    db.commit()
    return [Truth("sim-1", i, "advice", False, "advice", f"reply {i}") for i in range(len(scores))]


def test_judging_wait_says_how_many_turns_are_still_unjudged(db: Session, settings: Settings) -> None:
    truths = _turns(db, [-1, None])
    started = time.monotonic()
    assert wait_for_judging(_db_path(settings), truths, timeout_s=1.0) == 1
    assert time.monotonic() - started >= 1.0


def test_judging_wait_returns_once_every_turn_is_scored(db: Session, settings: Settings) -> None:
    truths = _turns(db, [-1, None])

    def judge() -> None:
        time.sleep(1.0)
        db.query(Turn).filter_by(turn_index=1).update({"score": 1})
        db.commit()

    judger = threading.Thread(target=judge)
    judger.start()
    assert wait_for_judging(_db_path(settings), truths, timeout_s=30.0) == 0
    judger.join()
