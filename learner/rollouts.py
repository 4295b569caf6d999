"""Teacher rollouts: replies the hinted teacher writes itself, for the student to learn without the hint.

Token-level distillation on the student's own reply can only re-weight tokens the student sampled.
When the hint asks for something the student never writes (an opener it never picks, a format it
never uses), every sampled token is already off course and there is nothing to raise. A rollout
is the teacher's own answer to the same prompt with the hint in view, so it contains that
behaviour; the student is trained on it with the hint removed (context distillation).

The loss is the rollout's negative log-likelihood under the student without the hint: a sample
estimate of KL(teacher || student) up to a constant, i.e. sequence-level distillation (greedy
rollouts) or its sampled form (temperature > 0). In-process on SmolLM2-135M with the bottomline
user's rule in words as the hint (`scripts/hint_ablation.py --arms rule`, one rollout per turn,
2 steps per version), the held-out greedy opener went 0/12 -> 0/12 -> 0/12 -> 8/12 "In short,"
over three versions, where the same learner without rollouts stayed at 0/12 (docs/BENCHMARKS.md).
"""

from __future__ import annotations

from typing import Any

import torch


@torch.no_grad()
def generate(
    model: Any,
    prompts: list[list[int]],
    max_new_tokens: list[int],
    *,
    eos_ids: list[int],
    pad_id: int,
    temperature: float,
    device: str,
) -> list[list[int]]:
    """One reply per prompt from `model` as it is (the caller picks the weights), batched.

    Left-padded so every row's next token comes from the same column; each reply is cut after its
    first end-of-sequence token (kept, so the student also learns where the teacher stops) and at
    its own token budget.
    """
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    sampling: dict[str, Any] = (
        {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0}
        if temperature > 0 else {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    )
    out = model.generate(
        input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=max(max_new_tokens),
        eos_token_id=eos_ids, pad_token_id=pad_id, **sampling,
    )
    replies = []
    for row, budget in enumerate(max_new_tokens):
        reply: list[int] = []
        for token in out[row, width:].tolist()[:budget]:
            reply.append(token)
            if token in eos_ids:
                break
        replies.append(reply)
    return replies


def rollout_loss(student: torch.Tensor) -> torch.Tensor:
    """Per-token negative log-likelihood of the teacher's tokens under the student."""
    return -student
