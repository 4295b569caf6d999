"""Packed, chunked token logprobs against a plain full-logits forward of each sequence alone."""

from __future__ import annotations

import pytest
import torch

from learner.logprobs import naive_token_logprobs, pack, token_stats, topk_of
from tests.learner.factories import TurnMaker

pytestmark = pytest.mark.slow


@torch.no_grad()
def test_packed_chunked_logprobs_match_separate_forwards(maker: TurnMaker) -> None:
    pairs = [("What is 2+2?", "2+2 equals 4."), ("Name a colour.", "Red is a primary colour, like blood.")]
    prompts = [maker.prompt_ids([{"role": "user", "content": u}]) for u, _ in pairs]
    responses = [maker.response_ids(r) for _, r in pairs]
    packed = pack(prompts, responses, "cpu")
    # a chunk of 5 splits responses across chunks, so chunk boundaries are exercised too
    stats = token_stats(maker.model, packed, chunk=5)
    for got, prompt, response in zip(packed.split(stats.logprobs), prompts, responses, strict=True):
        expected = torch.tensor(maker.logprobs(prompt, response))
        # without the block-diagonal mask the second sequence would differ by nats, not 1e-5
        assert torch.allclose(got, expected, atol=1e-4)
    assert torch.allclose(naive_token_logprobs(maker.model, packed), stats.logprobs, atol=1e-4)
    assert (stats.entropy > 0).all()
    ids, lps, targets = topk_of(maker.model, packed, 4, chunk=5)
    assert ids.shape == (len(packed.targets), 4) and (lps[:, :-1] >= lps[:, 1:]).all()
    assert torch.allclose(targets, stats.logprobs, atol=1e-4)
    extra = token_stats(maker.model, packed, chunk=5, extra_ids=ids)
    assert extra.extra_logprobs is not None and torch.allclose(extra.extra_logprobs, lps, atol=1e-4)
