"""`--lockstep`'s training between blocks: when a full batch is ready, as the learner itself decides, and
that each batch goes to the worker as a train task on the real embedded broker (Kombu's SQLAlchemy
transport on SQLite). A whole lockstep run is `bench learn --lockstep`; docs/BENCHMARKS.md holds two
runs of one command compared turn for turn."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from bench.learn.lockstep import batch_ready, newest_version, train_ready
from core.db import make_engine, make_session_factory
from core.modelload import load_model, load_tokenizer
from core.models import AdapterState, AdapterVersion, Base, TurnStatus
from core.settings import Settings
from tests.learner.factories import TurnMaker
from tests.utils.broker import queued_tasks


@pytest.fixture(scope="module")
def maker(model_path: str) -> TurnMaker:
    return TurnMaker(load_tokenizer(model_path), load_model(model_path, device="cpu", dtype="float32"))


@pytest.fixture
def lockstep(tmp_path: Path, model_path: str) -> tuple[Settings, Session]:
    settings = Settings(data_dir=tmp_path / "data", model=model_path, device="cpu", train_batch_size=2,
                        auto_train=False)
    settings.data_dir.mkdir(parents=True)
    engine = make_engine(settings.db_url)
    Base.metadata.create_all(engine)
    return settings, make_session_factory(engine)()


def test_a_batch_is_ready_once_the_learner_has_a_full_one(lockstep: tuple[Settings, Session],
                                                          maker: TurnMaker) -> None:
    settings, db = lockstep
    assert not batch_ready(settings) and newest_version(settings.data_dir / "learnproxy.db") is None
    maker.add(db, "What is 2+2?", "4", score=1)
    maker.add(db, "Name a colour.", "Blue", score=-1, status=TurnStatus.trained)  # trained already
    db.commit()  # the benchmark reads what the server committed
    assert not batch_ready(settings)
    maker.add(db, "Capital of France?", "Paris", score=1)
    db.commit()
    assert batch_ready(settings)
    db.add(AdapterVersion(name="v1", state=AdapterState.published, base_model="m", method="combined"))
    db.commit()
    assert newest_version(settings.data_dir / "learnproxy.db") == (1, AdapterState.published)


def test_a_ready_batch_is_sent_to_the_train_queue_and_a_worker_that_never_answers_times_out(
        lockstep: tuple[Settings, Session], maker: TurnMaker) -> None:
    settings, db = lockstep
    assert train_ready(settings, timeout_s=5) == []  # nothing ready: nothing sent, nothing waited for
    for question in ("What is 2+2?", "Capital of France?"):
        maker.add(db, question, "I am not sure.", score=-1)
    db.commit()
    with pytest.raises(TimeoutError, match="no version trained"):
        train_ready(settings, timeout_s=2)
    assert queued_tasks(settings, "train") == ["learner.tasks.train_step"]
