"""The learner's training step in measurable variants, for the train-speed bench and the GPU check.

Each variant adds one lever to the one before, on the same variable-length batch:
  naive    padded [B, Lmax] batch, full-vocabulary fp32 logits, then log_softmax (the baseline)
  packed   one packed row, no padding, still full fp32 logits for every position
  chunked  packed, plus `learner.logprobs.token_stats`: lm_head + log_softmax on response
           positions only, in checkpointed chunks (this is the step `Learner` takes)
  compiled chunked, with the transformer body under `torch.compile` (compile time reported apart)
The loss is always the learner's clipped surrogate with truncated importance ratios.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from learner.logprobs import causal_parts, naive_token_logprobs, pack, token_stats
from learner.losses import clipped_surrogate, importance_ratio

VARIANTS = ("naive", "packed", "chunked", "compiled")


@dataclass
class SpeedBatch:
    prompts: list[list[int]]
    responses: list[list[int]]
    advantages: list[float]

    @property
    def n_tokens(self) -> int:
        return sum(len(p) + len(r) for p, r in zip(self.prompts, self.responses, strict=True))


def synthetic_batch(
    vocab: int, lengths: list[int], response_frac: float = 0.25, seed: int = 0
) -> SpeedBatch:
    """Random-token sequences of the given total lengths; the last `response_frac` is the response."""
    rng = random.Random(seed)
    prompts, responses = [], []
    for n in lengths:
        n_resp = max(1, int(n * response_frac))
        ids = [rng.randrange(vocab) for _ in range(n)]
        prompts.append(ids[: n - n_resp])
        responses.append(ids[n - n_resp :])
    return SpeedBatch(prompts, responses, [rng.choice([-1.0, 1.0]) for _ in lengths])


def _padded_logprobs(model: Any, batch: SpeedBatch, device: Any) -> torch.Tensor:
    seqs = [p + r for p, r in zip(batch.prompts, batch.responses, strict=True)]
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, device=device)
        mask[i, : len(s)] = 1
    body, lm_head = causal_parts(model)
    hidden = body(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    logp = F.log_softmax(lm_head(hidden).float(), dim=-1)  # [B, L, V] fp32: what the naive step pays
    out = []
    for i, (p, r) in enumerate(zip(batch.prompts, batch.responses, strict=True)):
        pos = torch.arange(len(p) - 1, len(p) + len(r) - 1, device=device)
        out.append(logp[i, pos].gather(-1, torch.tensor(r, device=device)[:, None]).squeeze(-1))
    return torch.cat(out)


def _logprobs(model: Any, batch: SpeedBatch, variant: str, device: Any) -> torch.Tensor:
    if variant == "naive":
        return _padded_logprobs(model, batch, device)
    packed = pack(batch.prompts, batch.responses, device)
    if variant == "packed":
        return naive_token_logprobs(model, packed)
    return token_stats(model, packed).logprobs  # chunked, and compiled (same code, compiled body)


def step(model: Any, optimizer: Any, batch: SpeedBatch, variant: str, device: Any) -> float:
    """One optimizer step with `variant`; returns its wall time in seconds (device synchronised)."""
    start = time.perf_counter()
    adv = torch.cat([torch.full((len(r),), a, device=device) for r, a in
                     zip(batch.responses, batch.advantages, strict=True)])
    logp = _logprobs(model, batch, variant, device)
    behaviour = logp.detach() - 0.01  # near-on-policy, as after a fresh sync
    loss, _ = clipped_surrogate(importance_ratio(logp, behaviour, 2.0), adv, 0.2, 0.28)
    optimizer.zero_grad(set_to_none=True)
    loss.mean().backward()
    optimizer.step()
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def compile_body(model: Any) -> None:
    """Put the transformer body under torch.compile in place (dynamic shapes: packed rows vary)."""
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    lm.model = torch.compile(lm.model, dynamic=True)


def measure(
    model: Any, optimizer: Any, batch: SpeedBatch, variant: str, device: Any, steps: int
) -> dict[str, float]:
    """Median tokens/s over `steps` timed steps after one warm-up step (whose time is reported)."""
    if str(device).startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    warmup = step(model, optimizer, batch, variant, device)  # for `compiled`, this step compiles
    times = sorted(step(model, optimizer, batch, variant, device) for _ in range(steps))
    median = times[len(times) // 2]
    peak = torch.cuda.max_memory_allocated() / 2**30 if str(device).startswith("cuda") else float("nan")
    return {"tokens_per_s": batch.n_tokens / median, "median_s": median, "warmup_s": warmup, "peak_gib": peak}
