"""Learner fixtures: settings that train the real SmolLM2-135M, and a turn maker sharing its base model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.modelload import load_model, load_tokenizer
from core.settings import Settings
from tests.learner.factories import TurnMaker


@pytest.fixture
def settings(tmp_path: Path, model_path: str) -> Settings:
    """Overrides the shared fixture: the model is the cached real folder, batches are small."""
    return Settings(data_dir=tmp_path / "data", enqueue=False, auto_train=False, model=model_path,
                    device="cpu", train_batch_size=4)


@pytest.fixture(scope="session")
def maker(model_path: str) -> TurnMaker:
    torch.manual_seed(0)
    return TurnMaker(load_tokenizer(model_path), load_model(model_path, device="cpu", dtype="float32"))
