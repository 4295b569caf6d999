"""Training the real SmolLM2-135M on CPU through `run_train_step`, on judged turns in a real SQLite DB."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.modelload import load_model
from core.models import AdapterState, AdapterVersion, Turn, TurnStatus
from core.pointer import current_version_id
from core.settings import Settings
from learner.config import TrainConfig
from learner.losses import repeats, stutters
from learner.run import get_learner, run_train_step
from learner.trainer import Learner
from tests.learner.factories import TurnMaker

pytestmark = pytest.mark.slow

# one config for every test here, so the cached learner loads the model once (steps are the cost)
FAST = {"lr": 3e-4, "steps_per_batch": 2}
GOOD = [("What is 2+2?", "2+2 equals 4."), ("Name a primary colour.", "Red is a primary colour.")]
BAD = [("What is 2+2?", "banana banana!!"), ("Name a primary colour.", "I refuse to answer.")]


def _add_scored(db: Session, maker: TurnMaker) -> None:
    for user, reply in GOOD:
        maker.add(db, user, reply, score=1)
    for user, reply in BAD:
        maker.add(db, user, reply, score=-1)
    db.commit()


def _adapter_model(model_path: str, version: AdapterVersion) -> Any:
    """The saved version loaded the way a server would: fresh base + PEFT from the folder."""
    base = load_model(model_path, device="cpu", dtype="float32")
    assert version.path is not None
    return PeftModel.from_pretrained(base, version.path).eval()


def _mean_lp(maker: TurnMaker, model: Any, pairs: list[tuple[str, str]]) -> float:
    vals = []
    for user, reply in pairs:
        prompt = maker.prompt_ids([{"role": "user", "content": user}])
        lps = maker.logprobs(prompt, maker.response_ids(reply), model=model)
        vals.append(sum(lps) / len(lps))
    return sum(vals) / len(vals)


def test_two_steps_change_adapter_not_base_and_record_versions(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    config = TrainConfig.from_settings(settings, **FAST, lr_decay=0.5, lr_floor=0.4)
    _add_scored(db, maker)
    first = run_train_step(session_factory, settings, config=config, reason="test")
    assert first is not None
    learner = get_learner(settings, config)
    assert first.metrics["lr"] == pytest.approx(3e-4)  # trained from the base model: the full rate
    base_before = {k: v.clone() for k, v in maker.model.state_dict().items()}

    _add_scored(db, maker)
    second = run_train_step(session_factory, settings, config=config)
    assert second is not None

    # the second grew from one version: every step of it was taken at half the rate
    assert second.metrics["lr"] == pytest.approx(1.5e-4)
    assert [s["lr"] for s in first.metrics["steps"]] == [pytest.approx(3e-4)] * 2
    assert [s["lr"] for s in second.metrics["steps"]] == [pytest.approx(1.5e-4)] * 2
    # the first step starts from a fresh adapter whose policy equals the logged behaviour
    assert first.metrics["steps"][0]["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    assert first.metrics["steps"][0]["ratio_max"] <= config.ratio_cap
    # adapter weights changed from the first version to the second ...
    w1 = load_file(str(Path(first.path or "") / "adapter_model.safetensors"))
    w2 = load_file(str(Path(second.path or "") / "adapter_model.safetensors"))
    assert set(w1) == set(w2) and any("lora_B" in k for k in w1)
    assert any(not torch.equal(w1[k], w2[k]) for k in w1)
    assert any(w1[k].abs().sum() > 0 for k in w1 if "lora_B" in k)  # B starts at zero
    # ... and the learner's base weights equal the untouched base model's
    lm = learner.model.get_base_model()
    for name, param in lm.named_parameters():
        if "lora_" in name:
            continue
        key = name.replace(".base_layer", "")
        assert torch.equal(param.detach(), base_before[key]), name
    assert not any(p.requires_grad for n, p in lm.named_parameters() if "lora_" not in n)

    db.expire_all()
    rows = db.scalars(select(AdapterVersion).order_by(AdapterVersion.id)).all()
    assert [(r.id, r.parent_id, r.state) for r in rows] == [
        (first.id, None, AdapterState.retired), (second.id, first.id, AdapterState.published)]
    assert current_version_id(db) == second.id
    assert rows[1].name.startswith(f"v{second.id}-") and rows[0].name != rows[1].name
    folder = Path(rows[1].path or "")
    assert folder == settings.adapters_dir / rows[1].name
    assert (folder / "adapter_model.safetensors").exists()
    assert TrainConfig.from_json(json.loads((folder / "config.json").read_text())) == config
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["n_samples"] == 4 and metrics == rows[1].metrics
    step = metrics["steps"][0]
    for key in ("entropy", "clip_frac", "kl", "grad_norm", "tokens_per_s"):
        assert key in step
    trained = db.scalars(select(Turn).order_by(Turn.id)).all()
    assert [t.status for t in trained] == [TurnStatus.trained] * 8
    assert [t.trained_version_id for t in trained] == [first.id] * 4 + [second.id] * 4
    assert trained[0].advantage is not None and trained[0].advantage["rl"] == pytest.approx(1.0)  # 1 - mean 0
    assert trained[2].advantage is not None and trained[2].advantage["rl"] == pytest.approx(-1.0)

    # idempotent: nothing new to train on, so another call is a no-op and writes no row
    assert run_train_step(session_factory, settings, config=config, force=True) is None
    assert len(db.scalars(select(AdapterVersion)).all()) == 2


def test_rl_steps_raise_good_and_lower_bad_responses(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    config = TrainConfig.from_settings(settings, **FAST, method="rl")
    _add_scored(db, maker)
    good_before, bad_before = _mean_lp(maker, maker.model, GOOD), _mean_lp(maker, maker.model, BAD)
    version = run_train_step(session_factory, settings, config=config)
    assert version is not None
    tuned = _adapter_model(model_path, version)
    good_after, bad_after = _mean_lp(maker, tuned, GOOD), _mean_lp(maker, tuned, BAD)
    assert good_after > good_before
    assert bad_after < bad_before
    assert [s["clip_frac"] for s in version.metrics["steps"]][0] == 0.0  # step 1: ratio is exactly 1


def test_a_batch_with_nothing_to_learn_leaves_the_weights_as_they_were(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker
) -> None:
    """Every score the same: under the batch-mean baseline no token has an advantage, the gradient is
    zero, and AdamW's moments from the batch before must not move the weights on their own."""
    config = TrainConfig.from_settings(settings, **FAST, method="rl")
    _add_scored(db, maker)
    first = run_train_step(session_factory, settings, config=config, reason="test")
    assert first is not None
    for user, reply in GOOD + BAD:
        maker.add(db, user, reply, score=-1)
    db.commit()
    second = run_train_step(session_factory, settings, config=config)
    assert second is not None and second.parent_id == first.id
    w1 = load_file(str(Path(first.path or "") / "adapter_model.safetensors"))
    w2 = load_file(str(Path(second.path or "") / "adapter_model.safetensors"))
    assert any(w1[k].abs().sum() > 0 for k in w1 if "lora_B" in k)  # the first batch did learn
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert [s["grad_norm"] for s in second.metrics["steps"]] == [0.0]  # one step found nothing, the rest skipped


def test_unlikelihood_stutter_pushes_down_a_phrase_said_twice_in_a_row(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    """Every score the same, so RL has nothing to push with (as above) and what moves is the stutter's
    unlikelihood alone."""
    user, doubled = "How can I get better at small talk?", "In short, in short, ask one question."
    prompt, reply = maker.prompt_ids([{"role": "user", "content": user}]), maker.response_ids(doubled)[:-1]
    again = stutters(maker.tokenizer.batch_decode([[i] for i in reply]))
    assert again.sum() == 3 and not repeats(reply, 4).any()  # " in short,", which token 4-grams miss
    before = torch.tensor(maker.logprobs(prompt, reply))[again].sum()
    maker.add(db, user, doubled, score=-1)
    for user_, reply_ in GOOD + BAD[:1]:
        maker.add(db, user_, reply_, score=-1)
    db.commit()
    config = TrainConfig.from_settings(settings, **FAST, method="rl", unlikelihood_stutter=True)
    version = run_train_step(session_factory, settings, config=config)
    assert version is not None
    after = torch.tensor(maker.logprobs(prompt, reply, model=_adapter_model(model_path, version)))[again].sum()
    assert after < before - 1.0  # measured: -8.74 nats before, -14.17 after
    # with restart marks the trainer marks only where the phrase began again
    learner = Learner(model_path, TrainConfig(device="cpu", unlikelihood_stutter=True,
                                              unlikelihood_stutter_marks="restart"))
    marked = learner._repeated(reply)
    assert int(marked.sum()) == 1 and maker.tokenizer.decode([reply[int(marked.nonzero()[0, 0])]]) == " in"
