"""Embedded engine decode speed on the configured model (SmolLM2-135M by default): batch 1 vs batch 8.

Batch 1 and batch 8 run side by side in one run on one started engine, alternating, so they see the
same machine load. On a CPU a second engine in the dtype `auto` did not pick (bf16 or fp32) runs
in the same alternation, batch-1 decode and the prefill of a long prompt (where emulated bf16
costs most), so the table shows what `auto` gains on this machine. Each trial streams
`max_new_tokens` tokens per request at temperature 1 with a fixed seed; the figures are medians
over trials.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from core.modelload import load_tokenizer, pick_device, pick_dtype, resolve_model_path
from core.settings import Settings
from proxy.engines.base import GenerateRequest, SamplingParams
from proxy.engines.embedded import EmbeddedEngine

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
LONG_PROMPT_TOKENS = 300  # about a multi-turn session or a prompt carrying tool schemas


async def _one(engine: EmbeddedEngine, ids: list[int], n: int, seed: int) -> int:
    params = SamplingParams(temperature=1.0, max_new_tokens=n, seed=seed)
    count = 0
    async for out in engine.generate(GenerateRequest(f"bench-{seed}", ids, params)):
        count += len(out.token_ids)
    return count


async def _trial(engine: EmbeddedEngine, ids: list[int], batch: int, n: int,
                 seed: int) -> tuple[float, float]:
    """Aggregate and per-stream tokens/s for `batch` concurrent streams."""
    start = time.perf_counter()
    counts = await asyncio.gather(*(_one(engine, ids, n, seed + i) for i in range(batch)))
    elapsed = time.perf_counter() - start
    return sum(counts) / elapsed, statistics.median(counts) / elapsed


def dtype_name(dtype: str, device: str) -> str:
    """The torch dtype a setting resolves to on `device`, e.g. "float32" for auto on an AVX2 CPU."""
    return str(pick_dtype(dtype, device)).removeprefix("torch.")


async def _prefill_s(engine: EmbeddedEngine, ids: list[int], seed: int) -> float:
    """Seconds to the first token of a long prompt."""
    start = time.perf_counter()
    await _one(engine, ids, 1, seed)
    return time.perf_counter() - start


async def _measure(settings: Settings, device: str, chosen: str, *, quick: bool
                   ) -> tuple[dict[int, list[tuple[float, float]]], dict[str, dict[str, list[float]]]]:
    """(tokens/s per batch size on the `chosen` dtype, per dtype on a CPU: batch-1 tokens/s and
    long-prompt prefill seconds)."""
    path = resolve_model_path(settings.model, settings.models_dir)
    ids = list(load_tokenizer(path).encode(PROMPT, add_special_tokens=False))
    long_ids = (ids * (LONG_PROMPT_TOKENS // len(ids) + 1))[:LONG_PROMPT_TOKENS]
    engines = {chosen: EmbeddedEngine(path, device=device, dtype=chosen, max_batch_size=8)}
    if device == "cpu":
        other = "float32" if chosen == "bfloat16" else "bfloat16"
        engines[other] = EmbeddedEngine(path, device=device, dtype=other, max_batch_size=1)
    n, trials = (32, 2) if quick else (64, 5)
    results: dict[int, list[tuple[float, float]]] = {1: [], 8: []}
    by_dtype: dict[str, dict[str, list[float]]] = {name: {"tok_s": [], "prefill_s": []} for name in engines}
    try:
        for engine in engines.values():
            await engine.start()
            await _one(engine, ids, 8, 0)  # warm-up
        for t in range(trials):
            for batch in (1, 8):
                results[batch].append(await _trial(engines[chosen], ids, batch, n, seed=100 * t))
            by_dtype[chosen]["tok_s"].append(results[1][-1][0])
            for name, engine in engines.items():
                if name != chosen:
                    by_dtype[name]["tok_s"].append((await _trial(engine, ids, 1, n, seed=100 * t))[0])
                by_dtype[name]["prefill_s"].append(await _prefill_s(engine, long_ids, seed=100 * t))
    finally:
        for engine in engines.values():
            await engine.stop()
    return results, by_dtype


def run(settings: Settings, *, quick: bool) -> str:
    """Markdown section: tokens/s at batch 1 and 8, aggregate and per stream, medians."""
    device = pick_device(settings.device)
    chosen = dtype_name(settings.dtype, device)
    results, by_dtype = asyncio.run(_measure(settings, device, chosen, quick=quick))
    rows = []
    base = statistics.median(a for a, _ in results[1])
    for batch in (1, 8):
        agg = statistics.median(a for a, _ in results[batch])
        per = statistics.median(p for _, p in results[batch])
        rows.append(f"| {batch} | {agg:.1f} | {per:.1f} | {agg / base:.2f}x |")
    return "\n".join([
        f"### Embedded engine decode speed ({settings.model}, {device}, {chosen})",
        "",
        "| concurrent streams | aggregate tok/s | per-stream tok/s | aggregate vs batch 1 |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
        f"Medians of {len(results[1])} trials, batch 1 and 8 alternating in one run. Limited by CPU matmul "
        "throughput and the per-step Python overhead of one engine thread (sampling loops over rows); "
        "stream ends at EOS count as fewer tokens.",
        *_dtype_table(by_dtype, chosen, settings.dtype),
    ])


def _dtype_table(by_dtype: dict[str, dict[str, list[float]]], chosen: str, setting: str) -> list[str]:
    if len(by_dtype) < 2:
        return []
    tok = statistics.median(by_dtype[chosen]["tok_s"])
    pre = statistics.median(by_dtype[chosen]["prefill_s"])
    rows = []
    for name, v in by_dtype.items():
        t, p = statistics.median(v["tok_s"]), statistics.median(v["prefill_s"])
        label = f"{name} ({setting})" if name == chosen else name
        rows.append(f"| {label} | {t:.1f} | {t / tok:.2f}x | {p:.2f} | {p / pre:.2f}x |")
    return ["", f"Weights, side by side in the same alternation: batch-1 decode, and the first token of a "
            f"{LONG_PROMPT_TOKENS}-token prompt.", "",
            "| weights | decode tok/s | vs configured | prefill s | vs configured |", "| --- | --- | --- | --- | --- |",
            *rows]
