"""GPU check: the learner's LoRA step tokens/s and peak memory on random-init Qwen3 shapes.

Run on a machine with a GPU:  python scripts/gpu_check.py            (0.6B and 4B, batch 4x2048, bf16)
Anywhere, as a smoke test:    python scripts/gpu_check.py --tiny     (a tiny Qwen3 on CPU, seconds)

The models are built from hand-written `Qwen3Config`s (no download) with LoRA r=16 on every
projection. Each lever of `learner.speed` is measured on the same batch: naive (padded, full fp32
logits), packed (no padding), chunked (the learner's real step), compiled (body under
torch.compile; its compile time is reported apart, paid once per learner process). The batch is 4
sequences averaging 2048 tokens (lengths 1536-2560: real turns vary) unless `--fixed` makes them all
2048, the shape of the H200 reference (naive: 0.6B 32k tok/s, 4B 11.3k tok/s; goal 2x).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, no install

import torch  # noqa: E402

from learner.speed import VARIANTS, compile_body, measure, synthetic_batch  # noqa: E402

SHAPES: dict[str, dict[str, Any]] = {
    "0.6B": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "4B": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=1000, tie_word_embeddings=True),
}
REFERENCE = {"0.6B": 32_300.0, "4B": 11_300.0}  # naive tok/s on one H200 (issue 4)


def build(shape: str, device: str, dtype: torch.dtype) -> tuple[Any, Any, int]:
    """A random-init Qwen3 with LoRA r=16 on all linear layers, its optimizer, and its param count."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(**SHAPES[shape], max_position_embeddings=8192)
    config._attn_implementation = "sdpa"
    with torch.device(device):  # initialise on the GPU: a 4B CPU init takes minutes
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    n_params = sum(p.numel() for p in model.parameters())
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    return model, optimizer, n_params


def lengths(n: int, mean: int, fixed: bool) -> list[int]:
    if fixed or n == 1:
        return [mean] * n
    lo, hi = int(mean * 0.75), int(mean * 1.25)  # evenly spread, same total as n x mean
    return [lo + (hi - lo) * i // (n - 1) for i in range(n)]


def check(shape: str, args: argparse.Namespace, device: str, dtype: torch.dtype) -> list[str]:
    model, optimizer, n_params = build(shape, device, dtype)
    batch = synthetic_batch(SHAPES[shape]["vocab_size"], lengths(args.batch, args.seq, args.fixed))
    rows, naive = [], None
    for variant in args.variants:
        if variant == "compiled":
            compile_body(model)
        try:
            m = measure(model, optimizer, batch, variant, device, args.steps)
        except torch.cuda.OutOfMemoryError:
            rows.append(f"| {shape} | {variant} | OOM | | | | |")
            torch.cuda.empty_cache()
            continue
        naive = naive or m["tokens_per_s"]
        mfu = 4 * n_params * m["tokens_per_s"] / (args.peak_tflops * 1e12) if device.startswith("cuda") else 0
        peak = f"{m['peak_gib']:.1f}" if device.startswith("cuda") else "-"
        extra = f"compile+first step {m['warmup_s']:.0f} s" if variant == "compiled" else ""
        rows.append(f"| {shape} | {variant} | {m['tokens_per_s']:,.0f} | {m['tokens_per_s'] / naive:.2f}x "
                    f"| {peak} | {mfu:.0%} | {extra} |")
        print(rows[-1], flush=True)
    del model, optimizer
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="a tiny Qwen3 (CPU allowed): checks the script runs")
    p.add_argument("--shapes", nargs="+", default=["0.6B", "4B"], choices=list(SHAPES))
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048, help="mean sequence length")
    p.add_argument("--fixed", action="store_true", help="every sequence exactly --seq tokens")
    p.add_argument("--steps", type=int, default=5, help="timed steps per variant (median reported)")
    p.add_argument("--peak-tflops", type=float, default=790.0, help="bf16 dense peak for MFU (H200: 790)")
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.tiny:
        args.shapes, args.batch, args.seq, args.steps = ["tiny"], 2, 128, 2
    elif device == "cpu":
        print("no GPU found: use --tiny on CPU", file=sys.stderr)
        return 2
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    print(f"### Learner step on {torch.cuda.get_device_name() if device == 'cuda' else 'CPU'}\n")
    header = ["| model | step | tok/s | vs naive | peak GiB | MFU | note |", "|---|---|---|---|---|---|---|"]
    print("\n".join(header), flush=True)
    started = time.perf_counter()
    rows = [row for shape in args.shapes for row in check(shape, args, device, dtype)]
    print(f"\n{args.batch} sequences averaging {args.seq} tokens ({'fixed' if args.fixed else 'varied'}), "
          f"LoRA r=16 all projections, median of {args.steps} steps; H200 reference naive: "
          f"{', '.join(f'{k} {v:,.0f}' for k, v in REFERENCE.items())} tok/s. "
          f"Total {time.perf_counter() - started:.0f} s. Limits: one GPU, random weights, synthetic tokens.")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
