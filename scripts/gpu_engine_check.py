"""GPU check: the embedded engine's decode speed and a live adapter swap, on random-init SmolLM2 shapes.

Run on a machine with a GPU:  python scripts/gpu_engine_check.py --tokenizer DIR
Anywhere, as a smoke test:    python scripts/gpu_engine_check.py --tokenizer DIR --tiny   (CPU, seconds)

DIR is a folder holding the SmolLM2 tokenizer (the converted default model's folder will do). Each
model is built from a hand-written `LlamaConfig` with random weights (no download), saved with that
tokenizer, and served by the real `EmbeddedEngine`, the one `learnproxy serve` runs:

1. decode: 1, 8, 32 and 64 concurrent streams of `--tokens` tokens each at temperature 1, trials
   alternating, medians of aggregate and per-stream tokens/s, end to end (each stream's prefill,
   run one request at a time as the engine admits them, is inside the clock);
2. swap: 32 streams decode on adapter v1; while they run, adapter v2 (LoRA r=16, every projection,
   random non-zero B) is loaded and 8 streams start on it; then v1 is unloaded once its streams have
   ended. It reports the load time, the longest gap between two tokens of one stream while v2 was
   loading against the median gap, and how many streams failed or ended early.

Random weights sample random tokens, so an end-of-sequence token can end a stream early; tokens are
counted as they arrive and early ends are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, no install

import torch  # noqa: E402

from core.modelload import load_tokenizer  # noqa: E402
from proxy.engines.base import GenerateRequest, SamplingParams  # noqa: E402
from proxy.engines.embedded import EmbeddedEngine  # noqa: E402

SHAPES: dict[str, dict[str, Any]] = {
    "135M": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                 num_key_value_heads=3),
    "1.7B": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
                 num_key_value_heads=32),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
}
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def build(shape: str, tokenizer_dir: str, out: Path, device: str) -> int:
    """Save a random-init model and two random LoRA adapters under `out`; return the param count."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, LlamaConfig

    tokenizer = load_tokenizer(tokenizer_dir)
    config = LlamaConfig(**SHAPES[shape], vocab_size=len(tokenizer), tie_word_embeddings=True,
                         max_position_embeddings=8192,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    lora = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                            task_type="CAUSAL_LM"))
    for name in ("v1", "v2"):
        for pname, param in lora.named_parameters():
            if "lora_B" in pname:
                torch.nn.init.normal_(param, std=0.02)
        lora.save_pretrained(out / name)
    del model, lora
    gc.collect()
    return n_params


async def stream(engine: EmbeddedEngine, ids: list[int], n: int, seed: int, adapter: str | None = None,
                 stamps: list[float] | None = None) -> tuple[int, str | None]:
    """(tokens received, finish reason) of one stream; `stamps` gets each arrival time."""
    params = SamplingParams(temperature=1.0, max_new_tokens=n, seed=seed)
    count, reason = 0, None
    async for out in engine.generate(GenerateRequest(f"gpu-{seed}", ids, params, adapter)):
        count += len(out.token_ids)
        reason = out.finish_reason or reason
        if stamps is not None:
            stamps.extend([time.perf_counter()] * len(out.token_ids))
    return count, reason


async def decode(engine: EmbeddedEngine, ids: list[int], n: int, trials: int, sizes: list[int]
                 ) -> dict[int, tuple[float, float]]:
    """Median (aggregate, per-stream) tokens/s per number of concurrent streams."""
    runs: dict[int, list[tuple[float, float]]] = {b: [] for b in sizes}
    for t in range(trials):
        for b in sizes:
            start = time.perf_counter()
            done = await asyncio.gather(*(stream(engine, ids, n, 1000 * t + i) for i in range(b)))
            elapsed = time.perf_counter() - start
            counts = [c for c, _ in done]
            runs[b].append((sum(counts) / elapsed, statistics.median(counts) / elapsed))
    return {b: (statistics.median(a for a, _ in r), statistics.median(p for _, p in r)) for b, r in runs.items()}


async def swap(engine: EmbeddedEngine, ids: list[int], n: int, out: Path) -> dict[str, Any]:
    """Load v2 while 32 streams decode on v1; see the module docstring."""
    await engine.load_adapter("v1", str(out / "v1"))
    stamps: list[list[float]] = [[] for _ in range(32)]
    old = [asyncio.create_task(stream(engine, ids, n, 7000 + i, "v1", stamps[i])) for i in range(32)]
    deadline = time.perf_counter() + 60
    while min(len(s) for s in stamps) < 8 and not any(t.done() for t in old):  # every v1 stream decodes
        if time.perf_counter() > deadline:
            raise TimeoutError("the v1 streams did not all start decoding within 60 s")
        await asyncio.sleep(0.005)
    began = time.perf_counter()
    await engine.load_adapter("v2", str(out / "v2"))
    ended = time.perf_counter()
    new = [asyncio.create_task(stream(engine, ids, n // 2, 8000 + i, "v2")) for i in range(8)]
    results = await asyncio.gather(*old, *new, return_exceptions=True)
    await engine.unload_adapter("v1")
    failed = sum(isinstance(r, BaseException) for r in results)
    early = sum(1 for r in results if not isinstance(r, BaseException) and r[1] != "length")
    gaps, during = [], []
    for s in stamps:
        for a, b in zip(s, s[1:], strict=False):
            gaps.append(b - a)
            if b >= began and a <= ended:
                during.append(b - a)
    return {"load_s": ended - began, "max_gap_ms": 1000 * max(during) if during else None,
            "median_gap_ms": 1000 * statistics.median(gaps), "failed": failed, "early": early,
            "streams": len(results), "v1_left": "v1" in engine.loaded_adapters()}


async def check(shape: str, args: argparse.Namespace, device: str) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        started = time.perf_counter()
        n_params = build(shape, args.tokenizer, out, device)
        engine = EmbeddedEngine(str(out / "model"), device=device, dtype="bfloat16", max_batch_size=64)
        await engine.start()
        try:
            ids = list(load_tokenizer(str(out / "model")).encode(PROMPT, add_special_tokens=False))
            await stream(engine, ids, 8, 0)  # warm-up
            speed = await decode(engine, ids, args.tokens, args.trials, args.streams)
            swapped = await swap(engine, ids, args.tokens, out)
        finally:
            await engine.stop()
        base = speed[1][0] if 1 in speed else speed[args.streams[0]][0]
        rows = [f"| {shape} ({n_params / 1e6:,.0f}M) | {b} | {agg:,.0f} | {per:,.1f} | {agg / base:.2f}x |"
                for b, (agg, per) in speed.items()]
        gap = "n/a" if swapped["max_gap_ms"] is None else f"{swapped['max_gap_ms']:.0f}"
        swap_row = (f"| {shape} | {swapped['load_s']:.2f} | {gap} | "
                    f"{swapped['median_gap_ms']:.1f} | {swapped['failed']} of {swapped['streams']} | "
                    f"{swapped['early']} | {'yes' if swapped['v1_left'] else 'no'} |")
        print(f"{shape}: built, served and measured in {time.perf_counter() - started:.0f} s", flush=True)
        del engine
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        return rows + ["SWAP " + swap_row]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", required=True, help="folder with the SmolLM2 tokenizer files")
    p.add_argument("--tiny", action="store_true", help="a tiny model on CPU: checks the script runs")
    p.add_argument("--shapes", nargs="+", default=["135M", "1.7B"], choices=list(SHAPES))
    p.add_argument("--streams", nargs="+", type=int, default=[1, 8, 32, 64])
    p.add_argument("--tokens", type=int, default=128, help="tokens per stream")
    p.add_argument("--trials", type=int, default=3)
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.tiny:
        args.shapes, args.streams, args.tokens, args.trials = ["tiny"], [1, 8], 16, 1
    elif device == "cpu":
        print("no GPU found: use --tiny on CPU", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    started = time.perf_counter()
    rows = [row for shape in args.shapes for row in asyncio.run(check(shape, args, device))]
    print(f"\n### Embedded engine on {name} (bf16, random weights)\n")
    print("| model | concurrent streams | aggregate tok/s (end to end) | per-stream tok/s | vs 1 stream |\n"
          "|---|---|---|---|---|")
    print("\n".join(r for r in rows if not r.startswith("SWAP ")))
    print("\n| model | v2 load s | longest token gap while loading, ms | median token gap, ms | "
          "streams failed | ended before max tokens | v1 still loaded |\n|---|---|---|---|---|---|---|")
    print("\n".join(r.removeprefix("SWAP ") for r in rows if r.startswith("SWAP ")))
    print(f"\n{args.tokens} tokens per stream at temperature 1, medians of {args.trials} trials; the swap "
          f"runs 32 streams on v1 and loads v2 under them. Total {time.perf_counter() - started:.0f} s. "
          "Limits: one GPU, random weights, one engine thread.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
