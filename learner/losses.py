"""Loss pieces on per-token tensors: importance ratio, clipped surrogate, KL, top-K distillation.

All functions take flat [n_tokens] tensors (top-K ones [n_tokens, K]) and return per-token values;
the trainer averages over the batch's response tokens (token-level, as in DAPO), so long replies
weigh by their length rather than being squashed to one sample each.
"""

from __future__ import annotations

import torch


def importance_ratio(logp: torch.Tensor, behavior_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """pi_theta / pi_behavior per token, truncated at `cap`.

    pi_behavior is the logged sampling logprob from the serving engine, not a recomputation, so
    the ratio corrects for the adapter version and numerics that actually produced the tokens.
    Above the cap the ratio is constant, so its gradient is zero (truncated importance sampling).
    """
    return torch.exp(logp - behavior_logp).clamp(max=cap)


def clipped_surrogate(
    ratio: torch.Tensor, advantage: torch.Tensor, eps_low: float, eps_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO loss -min(r*A, clip(r, 1-eps_low, 1+eps_high)*A) and a mask of clipped tokens.

    A token is "clipped" when the clipped branch is the active one, i.e. it gives no gradient.
    """
    clipped_ratio = ratio.clamp(1 - eps_low, 1 + eps_high)
    unclipped = ratio * advantage
    clipped = clipped_ratio * advantage
    loss = -torch.minimum(unclipped, clipped)
    was_clipped = (clipped < unclipped) & (ratio != clipped_ratio)
    return loss, was_clipped


def kl_to_reference(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref) on sampled tokens: non-negative, low variance."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def opd_token_advantage(gap: torch.Tensor, clip: float, floor: float | None = None) -> torch.Tensor:
    """Hint distillation on sampled tokens: the teacher - student logprob gap clipped to [floor, c], floor -c
    unless given."""
    return gap.clamp(-clip if floor is None else floor, clip)


def repeats(ids: list[int], n: int) -> torch.Tensor:
    """[len(ids)] bools: the token lies inside an n-gram of `ids` that already occurred earlier in them.

    Every token of the repeated n-gram is marked, not only the one that completes it: in the label said
    again ("My advice: … * **My advice:**") the hinted teacher scores the "My" that begins the second
    saying up to +3 nats above the student, as much as the tokens after it (scripts/opd_copy_bias.py).
    """
    seen: set[tuple[int, ...]] = set()
    out = torch.zeros(len(ids), dtype=torch.bool)
    for end in range(n, len(ids) + 1):
        gram = tuple(ids[end - n:end])
        if gram in seen:
            out[end - n:end] = True
        seen.add(gram)
    return out


STUTTER_MARKS = " \t\r\n*_`#>-\"'\u201c\u201d\u2018\u2019"  # stripped from a piece's ends: spacing, markdown, quotes
FENCE = "```"


def _stutter_keys(pieces: list[str]) -> list[tuple[int, str, bool]]:
    """(index, key, begins a word) per piece that has a key: its text lowercased, STUTTER_MARKS stripped
    from its ends (a piece of only those has none). A piece in or of a code fence, or holding part of a
    character (U+FFFD, from decoding one token alone), gets a key no other piece has, so nothing matches
    across it. A piece begins a word when its key has a letter and it opens the text, opens with spacing
    or a mark, or follows a piece that ends in one."""
    out = []
    code = False
    for i, piece in enumerate(pieces):
        fenced = FENCE in piece
        if code or fenced or "\ufffd" in piece:
            out.append((i, f"\x00{i}", False))
        elif key := piece.strip(STUTTER_MARKS).lower():
            opens = i == 0 or not piece[:1].isalnum() or not pieces[i - 1][-1:].isalnum()
            out.append((i, key, opens and any(ch.isalpha() for ch in key)))
        code ^= piece.count(FENCE) % 2 == 1
    return out


def stutters(pieces: list[str], max_len: int = 16, restart_only: bool = False) -> torch.Tensor:
    """[len(pieces)] bools: the piece lies in a run of 2 to `max_len` keyed pieces (`_stutter_keys`) that
    says again, right away, the run before it ("My advice:My advice:", "In short, in short,"). The second
    saying is marked, spacing inside it included; with `restart_only` only the first keyed piece of each
    saying after the first (`_restarts`), where the reply began the phrase again. Token n-gram `repeats`
    misses such a stutter when the phrase is shorter than its n, or when the second saying begins a
    different token (" in" after "In"). The second saying must begin two words or more: a word or number
    said again ("very, very", "Bora Bora", "2020", "| Yes | Yes |") is no stutter. Line breaks are
    spacing, so a line said again on the next line is one, outside code fences."""
    keys = _stutter_keys(pieces)
    out = torch.zeros(len(pieces), dtype=torch.bool)
    if restart_only:
        for k in _restarts(keys, max_len):
            out[keys[k][0]] = True
        return out
    for start in range(len(keys)):
        for n in range(2, min(max_len, (len(keys) - start) // 2) + 1):
            if _said_again(keys, start, n):
                out[keys[start + n][0]:keys[start + 2 * n - 1][0] + 1] = True
    return out


def _said_again(keys: list[tuple[int, str, bool]], start: int, n: int) -> bool:
    """Whether the n keyed pieces from `start` are said again right after, the second saying beginning two
    words or more."""
    text = [key for _, key, _ in keys[start:start + 2 * n]]
    return len(text) == 2 * n and text[:n] == text[n:] and sum(w for _, _, w in keys[start + n:start + 2 * n]) >= 2


def _restarts(keys: list[tuple[int, str, bool]], max_len: int) -> list[int]:
    """Key positions where a phrase is begun again right after it was said: read left to right, the first
    phrase said twice from a position (its shortest length), then each further saying of it, and on after
    them. "My advice: My advice: My advice:" gives the second and third "My", not the shifted runs inside
    ("advice: My" said again)."""
    out, start = [], 0
    while start < len(keys):
        n = next((n for n in range(2, min(max_len, (len(keys) - start) // 2) + 1) if _said_again(keys, start, n)),
                 None)
        if n is None:
            start += 1
            continue
        again = start + n
        while _said_again(keys, again - n, n):
            out.append(again)
            again += n
        start = again
    return out


def unlikelihood(logp: torch.Tensor) -> torch.Tensor:
    """Per-token -log(1 - p): pushes down a token the student should not have written (Welleck et al.,
    "Neural Text Generation with Unlikelihood Training", 2019). Unlike a negative advantage its pull
    grows as p nears 1, where a loop's tokens sit once it has set in: the gradient on the logprob is
    p / (1 - p), unbounded but for the clamp (above 1 - 1e-6 the loss is constant and gives none).
    Only the gradient-norm clip holds a step back: in its advice runs without a KL anchor (weights 2 and
    0.5) the KL to the base ran away, and with `kl_coef` 0.1 it stayed under 2.5."""
    return -torch.log1p(-logp.exp().clamp(max=1 - 1e-6))


def topk_reverse_kl(
    student_topk: torch.Tensor,
    student_tail: torch.Tensor,
    teacher_topk: torch.Tensor,
    teacher_tail: torch.Tensor,
) -> torch.Tensor:
    """Per-position KL(student || teacher) over the teacher's top-K tokens plus one tail bucket.

    Inputs are logprobs: the K ids' logprobs [n, K] under each model and each model's log-mass
    outside them [n]. Unlike the token advantage this reaches tokens the student never sampled:
    a token the teacher ranks in its top K gets gradient whether or not it was in the response.
    """
    s, t = _bucketed(student_topk, student_tail), _bucketed(teacher_topk, teacher_tail)
    return (s.exp() * (s - t)).sum(-1)


def topk_forward_kl(
    student_topk: torch.Tensor,
    student_tail: torch.Tensor,
    teacher_topk: torch.Tensor,
    teacher_tail: torch.Tensor,
) -> torch.Tensor:
    """Per-position KL(teacher || student) over the teacher's top-K tokens plus one tail bucket.

    Same inputs as `topk_reverse_kl`. The gradient on a token's logit is p_student - p_teacher, so a
    token the teacher ranks high is pulled up with full force even where the student gives it no
    mass at all. The reverse direction's pull on it is p_student * (...), next to nothing there: the
    hinted teacher's "In short," opener, never sampled by the student, stays out of its reach.
    """
    s, t = _bucketed(student_topk, student_tail), _bucketed(teacher_topk, teacher_tail)
    return (t.exp() * (t - s)).sum(-1)


def _bucketed(topk_logp: torch.Tensor, tail: torch.Tensor) -> torch.Tensor:
    """[n, K] top-K logprobs and [n] tail log-mass as one [n, K+1] distribution."""
    return torch.cat([topk_logp, tail[:, None]], dim=-1)


def tail_logprob(topk_logp: torch.Tensor) -> torch.Tensor:
    """log(1 - sum_k p_k) for [n, K] logprobs."""
    return torch.log1p(-topk_logp.exp().sum(-1).clamp(max=1 - 1e-6))
