"""Rolling back a served version the judge scored worse than its parent (learner/regression.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core import pointer
from core.db import session_scope
from core.models import AdapterState, AdapterVersion, Label, Turn
from core.settings import Settings
from learner import regression
from learner.config import TrainConfig
from learner.run import run_train_step
from tests.learner.factories import TurnMaker
from tests.learner.test_training import FAST, _add_scored


def _version(db: Session, parent: int | None, state: AdapterState) -> AdapterVersion:
    row = AdapterVersion(name=f"pending-{parent}-{state}", parent_id=parent, state=state, base_model="m",
                         method="combined", config={})
    db.add(row)
    db.flush()
    row.name = f"v{row.id}-test"
    return row


def _served(db: Session, maker: TurnMaker, version: int | None, scores: list[int]) -> None:
    for i, score in enumerate(scores):
        maker.add(db, f"question {i}", f"answer {i}", score=score, served_by=version)


def _two_versions(db: Session, maker: TurnMaker, parent_scores: list[int], child_scores: list[int]) -> tuple[int, int]:
    parent = _version(db, None, AdapterState.retired)
    child = _version(db, parent.id, AdapterState.ready)
    pointer.publish(db, child.id)
    _served(db, maker, parent.id, parent_scores)
    _served(db, maker, child.id, child_scores)
    db.commit()
    return parent.id, child.id


def test_a_version_trained_on_from_a_rejected_one_is_checked_against_and_rolled_back_to_the_served_one(
    db: Session, maker: TurnMaker
) -> None:
    """With publish_check_train_on a version's parent may be a rejected one, which never served a turn: the
    rollback compares it with, and serves again, the version the rejected chain grew from."""
    served = _version(db, None, AdapterState.retired)
    rejected = _version(db, served.id, AdapterState.rejected)
    child = _version(db, rejected.id, AdapterState.ready)
    pointer.publish(db, child.id)
    _served(db, maker, served.id, [1] * 8)
    _served(db, maker, child.id, [-1] * 8)
    db.commit()
    check = regression.roll_back_if_worse(db, margin=0.5, min_turns=8, labels_override=True)
    assert check is not None and check.parent.version_id == served.id and check.parent.n == 8
    assert pointer.current_version_id(db) == served.id
    assert db.get(AdapterVersion, child.id).state == AdapterState.rolled_back  # type: ignore[union-attr]
    assert db.get(AdapterVersion, rejected.id).state == AdapterState.rejected  # type: ignore[union-attr]


def test_approval_counts_judged_main_turns_of_one_version_and_labels_override(db: Session,
                                                                              maker: TurnMaker) -> None:
    parent, child = _two_versions(db, maker, [1, 1, -1], [-1, 0])
    maker.add(db, "unjudged", "x", served_by=child)  # no score yet: not counted
    side = maker.add(db, "side", "x", score=1, served_by=child)
    side.turn_type = "side"  # side turns are never judged for training; not counted either
    _served(db, maker, None, [-1])  # the base model's turn
    db.commit()
    assert regression.approval(db, parent, labels_override=True) == regression.Approval(parent, 3, 1 / 3)
    assert regression.approval(db, child, labels_override=True) == regression.Approval(child, 2, -0.5)
    assert regression.approval(db, None, labels_override=True) == regression.Approval(None, 1, -1)
    turn_id = db.execute(select(Turn.id).where(Turn.adapter_version_id == child, Turn.score == -1)).scalar_one()
    db.add_all([Label(turn_id=turn_id, value=-1, author="a"), Label(turn_id=turn_id, value=1, author="b")])
    db.commit()
    assert regression.approval(db, child, labels_override=True).mean == 0.5  # the latest label, +1
    assert regression.approval(db, child, labels_override=False).mean == -0.5


def test_a_version_scored_worse_than_its_parent_is_rolled_back(db: Session, maker: TurnMaker) -> None:
    parent, child = _two_versions(db, maker, [1, 1, 1, -1], [-1, -1, 1, -1])  # means 0.5 and -0.5
    check = regression.roll_back_if_worse(db, margin=0.5, min_turns=4, labels_override=True)
    db.commit()
    assert check is not None and check.regressed
    assert pointer.current_version_id(db) == parent
    rows = {r.id: r for r in db.scalars(select(AdapterVersion))}
    assert rows[child].state == AdapterState.rolled_back and rows[parent].state == AdapterState.published
    kept = rows[child].metrics["rollback"]
    assert kept["version"] == {"version_id": child, "n": 4, "mean": -0.5}
    assert kept["parent"] == {"version_id": parent, "n": 4, "mean": 0.5} and kept["margin"] == 0.5
    # the parent, now served, has no parent of its own that served turns: nothing more to decide
    assert regression.roll_back_if_worse(db, margin=0.5, min_turns=4, labels_override=True) is None


@pytest.mark.parametrize(("child_scores", "margin", "min_turns"), [
    ([-1, -1, 1, -1], 0.5, 5),  # worse, but too few turns to decide
    ([1, -1, 1, -1], 0.5, 4),  # 0.0 against 0.5: within the margin
    ([-1, -1, 1, -1], 1.5, 4),  # -0.5 against 0.5: within a wider margin
])
def test_no_rollback_without_enough_evidence(db: Session, maker: TurnMaker, child_scores: list[int],
                                             margin: float, min_turns: int) -> None:
    _, child = _two_versions(db, maker, [1, 1, 1, -1], child_scores)
    assert regression.roll_back_if_worse(db, margin=margin, min_turns=min_turns, labels_override=True) is None
    assert pointer.current_version_id(db) == child


def test_first_version_worse_than_the_base_model_goes_back_to_the_base(db: Session, maker: TurnMaker) -> None:
    first = _version(db, None, AdapterState.ready)
    pointer.publish(db, first.id)
    _served(db, maker, None, [1, 1, -1])
    _served(db, maker, first.id, [-1, -1, -1])
    db.commit()
    assert regression.roll_back_if_worse(db, margin=0.5, min_turns=3, labels_override=True) is not None
    assert pointer.current_version_id(db) is None


def test_train_step_checks_first_even_without_a_full_batch(settings: Settings, session_factory: sessionmaker[Session],
                                                          db: Session, maker: TurnMaker) -> None:
    parent, child = _two_versions(db, maker, [1] * 4, [-1] * 4)
    # a batch of 64 is far from ready: the step trains nothing, but checks the served version first
    config = TrainConfig.from_settings(settings, rollback_margin=0.5, rollback_min_turns=4, batch_size=64)
    assert run_train_step(session_factory, settings, config=config) is None
    db.expire_all()
    assert pointer.current_version_id(db) == parent
    assert TrainConfig.from_settings(settings).rollback_margin is None  # off unless asked for


@pytest.mark.slow
def test_version_trained_from_a_parent_rolled_back_meanwhile_is_not_published(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker
) -> None:
    config = TrainConfig.from_settings(settings, **FAST)
    _add_scored(db, maker)
    first = run_train_step(session_factory, settings, config=config)
    assert first is not None
    _add_scored(db, maker)

    def person_rolls_back(step: int, steps: int, metrics: dict[str, float]) -> None:
        if step == 1:  # while the second version trains, someone rolls the first back
            with session_scope(session_factory) as session:
                pointer.rollback(session)

    second = run_train_step(session_factory, settings, config=config, progress=person_rolls_back)
    assert second is not None and second.parent_id == first.id
    db.expire_all()
    assert db.get(AdapterVersion, second.id).state == AdapterState.ready  # saved, not served
    assert pointer.current_version_id(db) is None  # the base model, as the rollback left it
