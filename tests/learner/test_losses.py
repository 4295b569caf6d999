"""Loss pieces on small hand-made tensors: ratio, clipped surrogate, KL, distillation terms."""

from __future__ import annotations

import math

import pytest
import torch

from learner.config import TrainConfig
from learner.losses import (
    clipped_surrogate,
    importance_ratio,
    kl_to_reference,
    opd_token_advantage,
    repeats,
    stutters,
    tail_logprob,
    topk_forward_kl,
    topk_reverse_kl,
    unlikelihood,
)
from learner.rollouts import rollout_loss


def test_ratio_is_one_when_behaviour_equals_policy() -> None:
    logp = torch.tensor([-0.1, -2.5, -7.0])
    assert torch.equal(importance_ratio(logp, logp.clone(), cap=2.0), torch.ones(3))


def test_ratio_cap_holds_and_blocks_gradient() -> None:
    logp = torch.tensor([-0.1, -1.0], requires_grad=True)
    behaviour = torch.tensor([-3.0, -1.2])  # ratios e^2.9 (far above cap) and e^0.2
    ratio = importance_ratio(logp, behaviour, cap=2.0)
    assert ratio[0].item() == 2.0
    assert ratio[1].item() == pytest.approx(math.exp(0.2), rel=1e-5)
    ratio.sum().backward()
    assert logp.grad is not None
    assert logp.grad[0].item() == 0.0 and logp.grad[1].item() > 0


def test_clipped_surrogate_cases() -> None:
    ratio = torch.tensor([1.0, 1.5, 1.5, 0.5, 0.5, 1.1])
    adv = torch.tensor([1.0, 1.0, -1.0, 1.0, -1.0, -2.0])
    loss, clipped = clipped_surrogate(ratio, adv, eps_low=0.2, eps_high=0.28)
    # r=1.5, A>0: capped at 1.28; r=1.5, A<0: unclipped (pessimistic) 1.5; r=0.5, A>0: unclipped 0.5;
    # r=0.5, A<0: clipped at 0.8; r=1.1 inside the range
    expected = torch.tensor([-1.0, -1.28, 1.5, -0.5, 0.8, 2.2])
    assert torch.allclose(loss, expected)
    assert clipped.tolist() == [False, True, False, False, True, False]


def test_clipped_tokens_give_no_gradient() -> None:
    ratio = torch.tensor([1.5, 1.1], requires_grad=True)
    loss, _ = clipped_surrogate(ratio, torch.tensor([1.0, 1.0]), 0.2, 0.28)
    loss.sum().backward()
    assert ratio.grad is not None and ratio.grad.tolist() == [0.0, -1.0]


def test_kl_is_zero_at_reference_and_positive_elsewhere() -> None:
    logp = torch.tensor([-1.0, -2.0])
    assert torch.allclose(kl_to_reference(logp, logp), torch.zeros(2))
    assert (kl_to_reference(logp, logp - 0.5) > 0).all()


def test_opd_advantage_is_clipped_difference() -> None:
    gap = torch.tensor([-1.0, -10.0, -1.0]) - torch.tensor([-2.0, -1.0, -9.0])  # teacher - student
    adv = opd_token_advantage(gap, clip=5.0)
    assert adv.tolist() == [1.0, -5.0, 5.0]
    up = opd_token_advantage(gap, clip=5.0, floor=0.0)
    assert up.tolist() == [1.0, 0.0, 5.0]


def test_repeats_marks_every_token_of_an_ngram_seen_before() -> None:
    # 7 8 9 | 7 8 9 | 7: the second "7 8 9" is a repeat from its first token on
    assert repeats([7, 8, 9, 7, 8, 9, 7], 3).tolist() == [False, False, False, True, True, True, True]
    assert repeats([7, 8, 9, 7, 8, 9, 7], 2).tolist() == [False, False, False, True, True, True, True]
    # 5 7 8 … 6 7 8: only the bigram "7 8" comes again, so "6" before it is not marked
    assert repeats([5, 7, 8, 6, 7, 8], 2).tolist() == [False, False, False, False, True, True]
    assert not repeats([5, 7, 8, 6, 7, 8], 3).any()
    assert not repeats([1, 2, 3, 4], 2).any() and repeats([], 3).tolist() == []


def test_stutters_marks_a_run_said_again_right_away_whatever_its_case_spacing_or_quotes() -> None:
    # SmolLM2's pieces of "In short, in short, the answer is yes."
    pieces = ["In", " short", ",", " in", " short", ",", " the", " answer", " is", " yes", "."]
    assert [p for p, m in zip(pieces, stutters(pieces), strict=True) if m] == [" in", " short", ","]
    # spacing, markdown and quotes between the two sayings are skipped; inside the second one, marked
    pieces = ["My", " advice", ":", "\n\n", " **", "\"", "My", "\n", " advice", ":", " Start"]
    assert stutters(pieces).tolist() == [False] * 6 + [True] * 4 + [False]
    # a line said again on the next line, list marks and all
    pieces = ["Go", " to", " bed", ".", "\n", "-", " Go", " to", " bed", "."]
    assert stutters(pieces).tolist() == [False] * 6 + [True] * 4
    # a 4-token run said again is a stutter too; 4-gram repeats needs four tokens beyond
    assert stutters(["a", " b", " c", " d", " a", " b", " c", " d"]).tolist() == [False] * 4 + [True] * 4
    # restart_only marks where the phrase began again, not the words that continue it
    pieces = ["My", " advice", ":", " My", " advice", ":", " Rest", "."]
    assert stutters(pieces).tolist() == [False] * 3 + [True] * 3 + [False] * 2
    assert stutters(pieces, restart_only=True).tolist() == [False] * 3 + [True] + [False] * 4
    # said three times: each restart, not the shifted runs inside them ("advice: My" said again)
    thrice = ["My", " advice", ":", " My", " advice", ":", " My", " advice", ":", " Rest"]
    assert [i for i, m in enumerate(stutters(thrice, restart_only=True)) if m] == [3, 6]
    assert [i for i, m in enumerate(stutters(pieces[:6] + [" My", " plan", "."], restart_only=True)) if m] == [3]
    assert [i for i, m in enumerate(stutters(["a", " b", " a", " b", " a", " b", " c"], restart_only=True))
            if m] == [2, 4]
    # with markdown and a line break between the sayings, the restart is the word, not the marks
    pieces = ["My", " advice", ":", "\n\n", " **", "\"", "My", "\n", " advice", ":", " Start"]
    assert [i for i, m in enumerate(stutters(pieces, restart_only=True)) if m] == [6]


def test_stutters_leaves_alone_what_is_no_stutter() -> None:
    assert not stutters(["Thank", " you", ",", " thank", " you", " so", " much"]).any()  # the runs differ
    # one word or number said again, however many pieces it takes: may be meant
    assert not stutters(["It", " is", " very", ",", " very", ",", " very", " good"]).any()
    assert not stutters([" Bor", "a", " Bor", "a"]).any() and not stutters([" ", "2", "0", "2", "0"]).any()
    assert not stutters(["|", " Yes", " |", " Yes", " |"]).any()
    assert not stutters(["|", " ---", " |", " ---", " |"]).any()  # no words at all: a table's rule line
    # code: a line said again inside a fence is left alone
    assert not stutters(["```", "\n", "x", " =", " f", "(", "a", ")", "\n", "x", " =", " f", "(", "a", ")",
                         "\n", "```"]).any()
    # parts of one character (U+FFFD) match nothing: two different characters may decode alike
    assert not stutters(["\ufffd", "\ufffd", " ok", " go", "\ufffd", "\ufffd", " ok", " go"]).any()
    assert not stutters(["a", " b", " x", " a", " b"]).any() and stutters([]).tolist() == []
    assert not stutters(["a", " b", " a", " b"], max_len=1).any()


def test_unlikelihood_is_minus_log_one_minus_p_and_pushes_the_token_down() -> None:
    logp = torch.tensor([math.log(0.5), math.log(0.9), -20.0], requires_grad=True)
    loss = unlikelihood(logp)
    assert loss.tolist() == pytest.approx([math.log(2), math.log(10), 0.0], abs=1e-5)
    loss.sum().backward()
    assert logp.grad is not None and (logp.grad[:2] > 0).all()  # descent lowers each token's logprob
    assert logp.grad[1] > logp.grad[0]  # and harder the likelier it already is
    assert torch.isfinite(unlikelihood(torch.zeros(1))).all()  # p = 1 stays finite


def test_topk_reverse_kl_zero_when_equal_and_reaches_unsampled_tokens() -> None:
    teacher = torch.log(torch.tensor([[0.6, 0.3]]))
    same = topk_reverse_kl(teacher, tail_logprob(teacher), teacher, tail_logprob(teacher))
    assert same.item() == pytest.approx(0.0, abs=1e-6)
    # the student puts almost nothing on the teacher's second token: the gradient raises it
    student = torch.log(torch.tensor([[0.6, 0.01]])).requires_grad_(True)
    kl = topk_reverse_kl(student, tail_logprob(student), teacher, tail_logprob(teacher))
    assert kl.item() > 0
    kl.sum().backward()
    assert student.grad is not None and student.grad[0, 1].item() < 0  # descent raises its logprob


def test_forward_topk_kl_pulls_up_a_token_the_student_never_gives_mass() -> None:
    """The hinted teacher's opener, at 0.9 for it and 0.001 for the student: only forward KL lifts it."""
    teacher = torch.log(torch.tensor([[0.9, 0.05]]))
    same = topk_forward_kl(teacher, tail_logprob(teacher), teacher, tail_logprob(teacher))
    assert same.item() == pytest.approx(0.0, abs=1e-6)
    pulls = {}
    for name, divergence in (("forward", topk_forward_kl), ("reverse", topk_reverse_kl)):
        logits = torch.log(torch.tensor([[0.001, 0.6, 0.399]])).requires_grad_(True)
        student = torch.log_softmax(logits, -1)[:, :2]  # the teacher's top 2, then the tail bucket
        divergence(student, tail_logprob(student), teacher, tail_logprob(teacher)).sum().backward()
        assert logits.grad is not None
        pulls[name] = -logits.grad[0, 0].item()  # gradient descent raises the opener's logit by this
    assert pulls["forward"] == pytest.approx(0.9 - 0.001, abs=1e-3)  # p_teacher - p_student
    assert 0 < pulls["reverse"] < pulls["forward"] / 50


def test_rollout_loss_is_the_teacher_tokens_negative_log_likelihood() -> None:
    student = torch.tensor([-3.0, -0.5], requires_grad=True)
    loss = rollout_loss(student)
    assert loss.tolist() == [3.0, 0.5]
    loss.sum().backward()
    assert student.grad is not None and student.grad.tolist() == [-1.0, -1.0]  # descent raises both


def test_config_validation_says_what_to_set() -> None:
    with pytest.raises(ValueError, match="set token or topk"):
        TrainConfig(opd_mode="bogus")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="set reverse or forward"):
        TrainConfig(topk_direction="both")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ratio_cap"):
        TrainConfig(ratio_cap=1.1)
    assert TrainConfig().resolved_lr("cpu") == 3e-4 and TrainConfig().resolved_lr("cuda:0") == 1e-5
    assert TrainConfig.from_json(TrainConfig(rank=8).to_json()).rank == 8
    with pytest.raises(ValueError, match="rollout_max_tokens"):
        TrainConfig(rollouts=1, rollout_max_tokens=0)
    with pytest.raises(ValueError, match="set rollouts=1 or a temperature above 0"):
        TrainConfig(rollouts=2)
    with pytest.raises(ValueError, match="set rollout_trim too"):
        TrainConfig(rollout_trim_lists=True)
    with pytest.raises(ValueError, match="set rollout_open_as_asked too"):
        TrainConfig(rollout_asked_min_gain=-0.3)
    with pytest.raises(ValueError, match="set rollout_trim and rollout_from divergence too"):
        TrainConfig(rollout_stop_in_reply=True, rollout_trim=True)
    with pytest.raises(ValueError, match="rollout_asked_phrase learns"):
        TrainConfig(rollout_asked_phrase=True)
    with pytest.raises(ValueError, match="rollout_trim_finished trims within"):
        TrainConfig(rollout_trim_finished=True, rollout_trim=True)
    with pytest.raises(ValueError, match="unlikelihood_ngram"):
        TrainConfig(unlikelihood_ngram=1)
    with pytest.raises(ValueError, match="w_unlikelihood=-1.0: a loss weight"):
        TrainConfig(unlikelihood_ngram=4, w_unlikelihood=-1.0)
    with pytest.raises(ValueError, match="rollout_stop_weight"):
        TrainConfig(rollout_stop_weight=-1.0)
    with pytest.raises(ValueError, match="rollout_stop_weight: used only with rollouts or rollout_replay"):
        TrainConfig(rollout_stop_weight=10.0)
    with pytest.raises(ValueError, match="w_unlikelihood: used only with unlikelihood_ngram .* or unlikelihood_st"):
        TrainConfig(w_unlikelihood=0.5)
    with pytest.raises(ValueError, match="publish_check_slack, publish_check_drop: used only with publish_check"):
        TrainConfig(publish_check_slack=1, publish_check_drop=0.5)
    assert TrainConfig(rollouts=1, rollout_stop_weight=10.0).rollout_stop_weight == 10.0
    assert TrainConfig(opd_floor=0.0).opd_floor == 0.0
    assert TrainConfig(opd_floor=-5.0).opd_floor == -5.0  # -opd_clip: the same as None
    for floor in (0.5, -5.01):
        with pytest.raises(ValueError, match=f"opd_floor={floor}: set it in"):
            TrainConfig(opd_floor=floor)
    assert TrainConfig.from_json(TrainConfig(opd_floor=0.0).to_json()).opd_floor == 0.0
    with pytest.raises(ValueError, match="opd_floor: used only with opd_mode token"):
        TrainConfig(opd_floor=0.0, opd_mode="topk")
    assert TrainConfig(rollout_replay=4, rollout_stop_weight=10.0).rollout_stop_weight == 10.0  # the replay loss
    with pytest.raises(ValueError, match="publish_check_train_on: used only with publish_check"):
        TrainConfig(publish_check_train_on=2)
    assert TrainConfig(publish_check_canary=16, publish_check_train_on=2).publish_check_train_on == 2
    with pytest.raises(ValueError, match="unlikelihood_stutter_marks: used only with unlikelihood_stutter"):
        TrainConfig(unlikelihood_stutter_marks="restart")
    assert TrainConfig(unlikelihood_stutter=True, unlikelihood_stutter_marks="restart").unlikelihood_stutter
    with pytest.raises(ValueError, match="kl_skip_asked: used only with kl_coef"):
        TrainConfig(kl_skip_asked=True)
    assert TrainConfig(kl_coef=0.1, kl_skip_asked=True).kl_skip_asked
    assert TrainConfig(unlikelihood_ngram=4, w_unlikelihood=0.5).w_unlikelihood == 0.5
    assert TrainConfig(unlikelihood_stutter=True, w_unlikelihood=0.5).w_unlikelihood == 0.5
    assert TrainConfig(publish_check_canary=4, publish_check_slack=1).publish_check_slack == 1
    with pytest.raises(ValueError, match="rollout_trim_share"):
        TrainConfig(rollout_trim_share=0.0)
    with pytest.raises(ValueError, match="rollout_min_relevance"):
        TrainConfig(rollout_min_relevance=1.5)
    with pytest.raises(ValueError, match="rollout_grounding_tokens"):
        TrainConfig(rollout_grounding_tokens=-1)
    with pytest.raises(ValueError, match="set start or divergence"):
        TrainConfig(rollout_from="middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rollout_divergence_margin"):
        TrainConfig(rollout_divergence_margin=0.0)
