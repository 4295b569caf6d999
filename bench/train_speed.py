"""Train-speed benchmark: LoRA training tokens/s for SmolLM2-135M on CPU, step variants side by side.

The learner's own model and optimizer (`learner.trainer.Learner`, default config: r=16 on every
projection) take steps on one batch of agent-like turns of varied length, with each variant of
`learner.speed` in the same run: naive (padded, full fp32 logits), packed (no padding), chunked
(the step the learner really takes). torch.compile is left to `scripts/gpu_check.py`: on CPU its
compile time dwarfs a benchmark run.
"""

from __future__ import annotations

from core.modelload import resolve_model_path
from core.settings import Settings
from learner.config import TrainConfig
from learner.speed import measure, synthetic_batch
from learner.trainer import Learner


def run(settings: Settings, *, quick: bool) -> str:
    """A markdown section: median tokens/s per step variant, and the ratio to the naive step."""
    model_path = resolve_model_path(settings.model, settings.models_dir)
    config = TrainConfig(device="cpu" if settings.device == "auto" else settings.device)
    learner = Learner(model_path, config)
    learner.model.train()
    # prompts of a few hundred tokens and 25% response: a short agent turn (real ones run longer,
    # which only a GPU trains at a useful rate)
    lengths = [96, 128, 160, 192] if quick else [256, 384, 512, 640, 768, 896]
    steps = 2 if quick else 3
    batch = synthetic_batch(len(learner.tokenizer), lengths)
    rows, naive = [], 0.0
    for variant in ("naive", "packed", "chunked"):
        m = measure(learner.model, learner.optimizer, batch, variant, learner.device, steps)
        naive = naive or m["tokens_per_s"]
        rows.append(f"| {variant} | {m['tokens_per_s']:.0f} | {m['tokens_per_s'] / naive:.2f}x | "
                    f"{m['median_s']:.2f} |")
    return "\n".join([
        "### LoRA training speed (SmolLM2-135M, CPU)",
        "",
        f"One batch of {len(lengths)} turns ({sum(lengths)} tokens, lengths {lengths[0]}-{lengths[-1]}, "
        f"25% response), LoRA r={config.rank} on all projections, fp32; median of {steps} steps after one "
        "warm-up, all variants in one run.",
        "",
        "| step | tokens/s | vs naive | s/step |",
        "|---|---|---|---|",
        *rows,
        "",
        f"Limited by CPU matmul throughput on {learner.device} (fp32; the cores are shared with anything else "
        "running), not by memory: ratios are the figure to read, absolute tokens/s move with load.",
    ])
