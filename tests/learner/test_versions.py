"""The one-run guard, stale-lock recovery, the Celery task's no-op path, and the adapters CLI."""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cli import adapters as adapters_cli
from cli import train as train_cli
from core.celery_app import TRAIN_TASK, create_celery
from core.db import make_engine, make_session_factory
from core.migrate import upgrade
from core.models import AdapterState, AdapterVersion, utcnow
from core.pointer import current_version_id, point_to
from core.settings import Settings
from learner import versions
from learner.config import TrainConfig
from tests.learner.factories import TurnMaker
from tests.utils.factories import make_adapter_version


def test_guard_allows_one_run_and_recovers_stale_lock(settings: Settings,
                                                      session_factory: sessionmaker[Session]) -> None:
    config = TrainConfig()
    first = versions.acquire(session_factory, settings, config)
    assert first is not None and first.name.startswith(f"v{first.id}-") and first.state == AdapterState.training
    assert versions.acquire(session_factory, settings, config) is None  # busy
    with session_factory() as s:
        assert s.scalars(select(AdapterVersion)).all() == [s.get(AdapterVersion, first.id)]  # loser removed
        row = s.get(AdapterVersion, first.id)
        assert row is not None
        row.created_at = utcnow() - timedelta(seconds=config.lock_stale_s + 5)  # its worker died
        s.commit()
    second = versions.acquire(session_factory, settings, config)
    assert second is not None and second.id != first.id
    with session_factory() as s:
        dead = s.get(AdapterVersion, first.id)
        assert dead is not None and dead.state == AdapterState.failed and "stale" in dead.metrics["error"]
    versions.fail(session_factory, second.id, "boom")
    assert versions.acquire(session_factory, settings, config) is not None  # released by fail()


def test_with_publish_check_train_on_the_next_version_trains_from_a_rejected_one_for_so_many_in_a_row(
    db: Session
) -> None:
    served = make_adapter_version(db, state=AdapterState.published)
    point_to(db, served.id)
    first = make_adapter_version(db, state=AdapterState.rejected, parent_id=served.id)
    db.commit()
    assert versions.parent_for(db, 0) == served.id  # off: always the served version
    assert versions.parent_for(db, 1) == first.id
    second = make_adapter_version(db, state=AdapterState.rejected, parent_id=first.id)
    db.add(AdapterVersion(name="v-dead", base_model="m", method="combined", state=AdapterState.failed))
    db.commit()
    assert versions.parent_for(db, 2) == second.id  # a failed run is no version to train from
    assert versions.parent_for(db, 1) == served.id  # two rejected in a row: back to the served weights
    assert versions.served_ancestor(db, second.id) == served.id and versions.served_ancestor(db, None) is None
    point_to(db, None)  # a person serves the base model again: the rejected chain leads elsewhere
    db.commit()
    assert versions.parent_for(db, 2) is None
    point_to(db, served.id)
    make_adapter_version(db, state=AdapterState.ready, parent_id=served.id)
    db.commit()
    assert versions.parent_for(db, 2) == served.id  # the newest version passed: nothing rejected to go on from


def test_a_rejected_chain_can_start_from_the_base_model(db: Session) -> None:
    rejected = make_adapter_version(db, state=AdapterState.rejected)  # trained from the base, refused
    db.commit()
    assert versions.parent_for(db, 1) == rejected.id and versions.parent_for(db, 0) is None
    assert versions.served_ancestor(db, rejected.id) is None  # it grew from the base model's weights
    make_adapter_version(db, state=AdapterState.rejected, parent_id=rejected.id)
    db.commit()
    assert versions.parent_for(db, 1) is None  # two in a row: back to the base model


def test_lr_decay_counts_every_version_in_the_chain_and_stops_at_the_floor(db: Session) -> None:
    first = make_adapter_version(db, state=AdapterState.rolled_back)
    second = make_adapter_version(db, state=AdapterState.rejected, parent_id=first.id)
    third = make_adapter_version(db, state=AdapterState.published, parent_id=second.id)
    db.commit()
    assert [versions.depth(db, v) for v in (None, first.id, second.id, third.id)] == [0, 1, 2, 3]
    assert versions.depth(db, third.id, limit=2) == 2 and versions.depth(db, 999) == 0  # no such version
    config = TrainConfig(lr=1e-3, lr_decay=0.5, lr_floor=0.2)
    assert [config.version_lr("cpu", d) for d in range(4)] == pytest.approx([1e-3, 5e-4, 2.5e-4, 2e-4])
    assert config.decay_depth() == 3  # 0.5^3 is under the floor
    assert TrainConfig().decay_depth() == 0 and versions.depth(db, third.id, limit=0) == 0  # off: no walk
    assert TrainConfig(lr=1e-3).version_lr("cpu", 30) == 1e-3  # off by default
    with pytest.raises(ValueError, match="lr_floor: used only with lr_decay"):
        TrainConfig(lr_floor=0.5)
    for bad in ({"lr_decay": 0.0}, {"lr_decay": 0.5, "lr_floor": 1.0}):  # a floor of 1 keeps the rate
        with pytest.raises(ValueError, match="lr_floor in"):
            TrainConfig(**bad)


def test_task_is_a_noop_without_a_full_batch(settings: Settings, session_factory: sessionmaker[Session],
                                             db: Session, maker: TurnMaker) -> None:
    maker.add(db, "a", "x", score=1)  # one sample; a batch is 4
    db.commit()
    app = create_celery(settings)
    app.loader.import_default_modules()  # what a worker does at start: imports the `include` modules
    task = app.tasks[TRAIN_TASK]
    assert task.acks_late and task.time_limit
    assert task.apply(kwargs={"reason": "test"}).get() == {"trained": False}
    assert task.apply().get() == {"trained": False}  # and again: idempotent, no rows written
    assert db.scalars(select(AdapterVersion)).all() == []


def test_adapters_cli_promote_and_rollback(tmp_path: Path) -> None:
    # its own data dir: the CLI migrates the DB itself (the shared fixture would create_all first)
    settings = Settings(data_dir=tmp_path / "cli", enqueue=False, auto_train=False)
    run = adapters_cli.run
    assert run(argparse.Namespace(action="list"), settings) == 0
    factory = make_session_factory(make_engine(settings.db_url))
    with factory() as db:
        for i in (1, 2):
            db.add(AdapterVersion(name=f"v{i}-abc", state=AdapterState.ready, base_model="m", method="rl"))
        db.commit()
        assert run(argparse.Namespace(action="rollback"), settings) == 1  # the base model is served
        assert run(argparse.Namespace(action="promote", version="v1"), settings) == 0
        assert run(argparse.Namespace(action="promote", version="v2-abc"), settings) == 0
        assert run(argparse.Namespace(action="promote", version="v9"), settings) == 1
        db.expire_all()
        assert current_version_id(db) == 2
        assert run(argparse.Namespace(action="rollback"), settings) == 0
        db.expire_all()
        assert current_version_id(db) == 1
        assert db.get(AdapterVersion, 2).state == AdapterState.rolled_back  # type: ignore[union-attr]
        assert run(argparse.Namespace(action="list"), settings) == 0


@pytest.mark.slow
def test_train_cli_once(tmp_path: Path, model_path: str, maker: TurnMaker) -> None:
    settings = Settings(data_dir=tmp_path / "cli", enqueue=False, auto_train=False, model=model_path,
                        device="cpu", train_batch_size=4)
    upgrade(settings.db_url)  # what `train` does itself; here first, so the turn can be inserted
    factory = make_session_factory(make_engine(settings.db_url))
    with factory() as db:
        maker.add(db, "Say hi.", "Hi!", score=1)
        db.commit()
    args = argparse.Namespace(once=True, force=False, steps=None, no_publish=False)
    assert train_cli.run(args, settings) == 1  # one sample, a batch is 4
    assert train_cli.run(argparse.Namespace(**{**vars(args), "force": True}), settings) == 0
    with factory() as db:
        (row,) = db.scalars(select(AdapterVersion)).all()
        assert row.state == AdapterState.published and row.n_samples == 1 and row.metrics["reason"] == "cli"
        assert current_version_id(db) == row.id
