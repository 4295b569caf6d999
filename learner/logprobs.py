"""Token logprobs of given response ids under the learner's model, without full fp32 logits.

Sequences are packed into one row with positions restarting at 0 per sequence (transformers
builds a block-diagonal causal mask from such position ids), so there is no padding. Only the
positions that predict response tokens go through `lm_head`, in chunks, each under activation
checkpointing when gradients are on: peak memory holds one chunk of fp32 logits, not the whole
batch's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class Packed:
    """Several (prompt, response) sequences packed into one row."""

    input_ids: torch.Tensor  # [1, total]
    position_ids: torch.Tensor  # [1, total]
    predict_at: torch.Tensor  # [n_resp]: positions whose next token is a response token
    targets: torch.Tensor  # [n_resp]: those response tokens
    lengths: list[int]  # response tokens per sequence, in order

    def split(self, values: torch.Tensor) -> list[torch.Tensor]:
        """Per-sequence slices of a [n_resp, ...] tensor."""
        return list(torch.split(values, self.lengths))


def pack(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], device: Any) -> Packed:
    """Pack prompt+response pairs; every response needs at least one token, every prompt too."""
    ids: list[int] = []
    pos: list[int] = []
    predict: list[int] = []
    targets: list[int] = []
    for prompt, response in zip(prompts, responses, strict=True):
        if not prompt or not response:
            raise ValueError("pack needs a non-empty prompt and response per sequence")
        start = len(ids)
        seq = list(prompt) + list(response)
        ids.extend(seq)
        pos.extend(range(len(seq)))
        # position t predicts token t+1: the last prompt token predicts the first response token
        predict.extend(range(start + len(prompt) - 1, start + len(seq) - 1))
        targets.extend(response)
    return Packed(
        input_ids=torch.tensor([ids], device=device),
        position_ids=torch.tensor([pos], device=device),
        predict_at=torch.tensor(predict, device=device),
        targets=torch.tensor(targets, device=device),
        lengths=[len(r) for r in responses],
    )


@dataclass
class TokenStats:
    logprobs: torch.Tensor  # [n_resp], differentiable when grads are on
    entropy: torch.Tensor  # [n_resp], detached (logged only)
    extra_logprobs: torch.Tensor | None  # [n_resp, K] at requested ids, differentiable
    extra_tail: torch.Tensor | None  # [n_resp]: log of the mass outside the requested ids


def _head_chunk(
    lm_head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, extra: torch.Tensor | None
) -> tuple[torch.Tensor, ...]:
    logp = F.log_softmax(lm_head(hidden).float(), dim=-1)
    token = logp.gather(-1, targets[:, None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    if extra is None:
        return token, entropy
    picked = logp.gather(-1, extra)
    # log(1 - sum p_k), computed stably; clamp keeps the tail finite when top-K holds all the mass
    tail = torch.log1p(-picked.exp().sum(-1).clamp(max=1 - 1e-6))
    return token, entropy, picked, tail


def causal_parts(model: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The transformer body and lm_head of an HF causal LM, PEFT-wrapped or not."""
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return lm.model, lm.lm_head


def _hidden(model: Any, packed: Packed) -> tuple[torch.Tensor, torch.nn.Module]:
    """Final hidden states [total, d] of the packed row, and the lm_head to apply to them."""
    body, lm_head = causal_parts(model)
    # use_cache=False matters: transformers only builds the block-diagonal mask for packed
    # position ids when there is no KV cache; with one, sequences would attend to each other
    out = body(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False)
    return out.last_hidden_state[0], lm_head


def token_stats(
    model: Any, packed: Packed, *, chunk: int = 1024, extra_ids: torch.Tensor | None = None
) -> TokenStats:
    """Logprobs of `packed.targets` (and optionally of `extra_ids` [n_resp, K]) under `model`."""
    hidden, lm_head = _hidden(model, packed)
    hidden = hidden.index_select(0, packed.predict_at)
    parts: list[tuple[torch.Tensor, ...]] = []
    for start in range(0, hidden.shape[0], chunk):
        sl = slice(start, start + chunk)
        args = (lm_head, hidden[sl], packed.targets[sl], None if extra_ids is None else extra_ids[sl])
        if torch.is_grad_enabled():
            # recompute the chunk's logits in backward instead of keeping [chunk, vocab] fp32 alive
            parts.append(checkpoint(_head_chunk, *args, use_reentrant=False))
        else:
            parts.append(_head_chunk(*args))
    cols = list(zip(*parts, strict=True))
    return TokenStats(
        logprobs=torch.cat(cols[0]),
        entropy=torch.cat(cols[1]).detach(),
        extra_logprobs=torch.cat(cols[2]) if extra_ids is not None else None,
        extra_tail=torch.cat(cols[3]) if extra_ids is not None else None,
    )


@torch.no_grad()
def topk_of(
    model: Any, packed: Packed, k: int, *, chunk: int = 1024
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model's top-K token ids [n_resp, K] and their logprobs at each response position, and the
    logprobs of `packed.targets` [n_resp] from the same forward pass."""
    hidden, lm_head = _hidden(model, packed)
    hidden = hidden.index_select(0, packed.predict_at)
    ids, lps, targets = [], [], []
    for start in range(0, hidden.shape[0], chunk):
        logp = F.log_softmax(lm_head(hidden[start : start + chunk]).float(), dim=-1)
        top = logp.topk(k, dim=-1)
        ids.append(top.indices)
        lps.append(top.values)
        targets.append(logp.gather(-1, packed.targets[start : start + chunk, None]).squeeze(-1))
    return torch.cat(ids), torch.cat(lps), torch.cat(targets)


def naive_token_logprobs(model: Any, packed: Packed) -> torch.Tensor:
    """The reference path: full-vocabulary fp32 logits for every position, then gather."""
    hidden, lm_head = _hidden(model, packed)
    logp = F.log_softmax(lm_head(hidden).float(), dim=-1)
    return logp[packed.predict_at].gather(-1, packed.targets[:, None]).squeeze(-1)
