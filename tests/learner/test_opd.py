"""Hint distillation on the real SmolLM2-135M: token mode moves the student toward the teacher,
top-K mode lowers KL to the teacher's top-K distribution, even for a token never sampled."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from peft import PeftModel
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from core.modelload import eos_token_ids, load_model
from core.models import AdapterVersion, Turn, TurnStatus
from core.settings import Settings
from core.tokens import unpack_ids
from learner.config import TrainConfig
from learner.losses import repeats, tail_logprob, topk_reverse_kl
from learner.run import run_train_step
from learner.samples import Sample, replay_rollouts, teacher_messages
from learner.trainer import Learner, _summaries
from tests.learner.factories import TurnMaker

pytestmark = pytest.mark.slow

HINTED = [
    ("What is the capital of France?", "I am not sure.", "Answer directly: the capital of France is Paris."),
    ("Say hello to Bob.", "Goodbye.", "Start your reply with 'Hello Bob'."),
    ("What colour is the sky?", "I cannot say.", "Say that the sky is blue."),
    ("How many legs does a cat have?", "Cats are nice.", "Answer with the number: four."),
]


def _pairs(maker: TurnMaker) -> list[tuple[list[int], list[int], list[int]]]:
    """(student prompt, teacher prompt, response) ids per hinted turn."""
    out = []
    for user, reply, hint in HINTED:
        msgs = [{"role": "user", "content": user}]
        teacher = maker.prompt_ids(teacher_messages(msgs, hint))
        out.append((maker.prompt_ids(msgs), teacher, maker.response_ids(reply)))
    return out


def _version(settings: Settings, factory: sessionmaker[Session], db: Session, maker: TurnMaker,
             extra: int = 0, steps: int = 2, **cfg: Any) -> AdapterVersion:
    """Train one version on the hinted turns (plus `extra` already added) in `steps` steps. A test that
    reads only the rollout notes takes one step: the learner makes them before its first step."""
    for user, reply, hint in HINTED:
        maker.add(db, user, reply, score=0, hint=hint)
    db.commit()
    config = TrainConfig.from_settings(
        settings, method="opd", teacher="base", lr=3e-4, steps_per_batch=steps, batch_size=len(HINTED) + extra,
        **cfg
    )
    version = run_train_step(factory, settings, config=config)
    assert version is not None and version.metrics["n_opd"] == len(HINTED) + extra and version.path is not None
    return version


def _train(settings: Settings, factory: sessionmaker[Session], db: Session, maker: TurnMaker,
           model_path: str, extra: int = 0, **cfg: Any) -> Any:
    """Train one version as `_version` does; the tuned student, loaded from the version's files."""
    version = _version(settings, factory, db, maker, extra, **cfg)
    base = load_model(model_path, device="cpu", dtype="float32")
    return PeftModel.from_pretrained(base, version.path).eval()


def test_token_opd_moves_student_toward_teacher(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    student = _train(settings, session_factory, db, maker, model_path, opd_mode="token")
    gap_before, gap_after = [], []
    for prompt, t_prompt, response in _pairs(maker):
        teacher = torch.tensor(maker.logprobs(t_prompt, response))  # base model, hinted context
        gap_before.append((teacher - torch.tensor(maker.logprobs(prompt, response))).abs().mean())
        after = torch.tensor(maker.logprobs(prompt, response, model=student))
        gap_after.append((teacher - after).abs().mean())
    assert sum(gap_after) < sum(gap_before)


def _topk_kl(student: torch.Tensor, teacher: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    top = teacher.topk(k, dim=-1)
    s = student.gather(-1, top.indices)
    return topk_reverse_kl(s, tail_logprob(s), top.values, tail_logprob(top.values)), top.indices


def test_topk_opd_lowers_kl_including_unsampled_token(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    k = 8
    # before training, at the first position of the greeting turn (the student sampled "Goodbye"):
    # among the teacher's top-K tokens the student did not sample, the one whose logprob the KL's
    # gradient pushes up hardest, q_j * (KL - log(q_j / p_j)); it must rise after training
    prompt, t_prompt, response = _pairs(maker)[1]
    teacher0 = maker.dist(t_prompt, response)[0]
    student0 = maker.dist(prompt, response)[0]
    kl0, top = _topk_kl(student0[None], teacher0[None], k)
    candidates = [int(t) for t in top[0] if int(t) != response[0]]
    pull = torch.stack([student0[j].exp() * (kl0[0] - (student0[j] - teacher0[j])) for j in candidates])
    unsampled = candidates[int(pull.argmax())]
    assert pull.max() > 0 and teacher0[unsampled] > student0[unsampled]
    kl_before = [_topk_kl(maker.dist(p, r), maker.dist(tp, r), k)[0].mean() for p, tp, r in _pairs(maker)]

    tuned = _train(settings, session_factory, db, maker, model_path, opd_mode="topk", top_k=k)
    kl_after = [
        _topk_kl(maker.dist(p, r, tuned), maker.dist(tp, r), k)[0].mean() for p, tp, r in _pairs(maker)
    ]
    assert sum(kl_after) < sum(kl_before)
    student1 = maker.dist(prompt, response, tuned)[0]
    assert student1[unsampled] > student0[unsampled]


@torch.no_grad()
def _greedy(maker: TurnMaker, prompt: list[int], n: int) -> list[int]:
    """The base model's greedy reply, by plain transformers generate (independent of learner code)."""
    out = maker.model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                               temperature=None, top_p=None, top_k=None)
    return out[0, len(prompt):].tolist()


def test_teacher_rollouts_teach_the_hinted_reply_the_student_never_sampled(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    budget = 12
    # the hinted teacher's own greedy replies, scored by the unhinted student before and after
    before, replies = [], []
    for prompt, t_prompt, _ in _pairs(maker):
        reply = _greedy(maker, t_prompt, budget)
        replies.append(reply)
        before.append(sum(maker.logprobs(prompt, reply)))
    # one turn was served with a 4-token budget: its rollout keeps to it
    short = maker.add(db, "Name a primary colour.", "Maybe.", score=0, hint="Answer with one colour.",
                      params={"max_new_tokens": 4})
    tuned = _train(settings, session_factory, db, maker, model_path, extra=1, opd_mode="token", rollouts=1,
                   rollout_max_tokens=budget)
    after = [sum(maker.logprobs(p, r, model=tuned)) for (p, _, _), r in zip(_pairs(maker), replies, strict=True)]
    assert sum(after) > sum(before) + 1.0  # nats over the four replies
    db.expire_all()
    (note,) = short.advantage["rollouts"]  # written within the turn's budget, kept or not
    assert 0 < len(maker.tokenizer(note["text"], add_special_tokens=False)["input_ids"]) <= 4
    assert short.advantage["rollout_tokens"] <= 4
    # the learner's batched, left-padded rollouts are the teacher's own greedy replies, stored for review
    # with their gain: mean teacher-minus-student logprob, the student being the base (fresh adapter)
    stored = db.scalars(select(Turn).where(Turn.id != short.id).order_by(Turn.id)).all()
    for turn, (prompt, t_prompt, _), reply in zip(stored, _pairs(maker), replies, strict=True):
        (note,) = turn.advantage["rollouts"]
        assert note["text"] == maker.tokenizer.decode(reply, skip_special_tokens=True)
        gain = sum(t - s for t, s in zip(maker.logprobs(t_prompt, reply), maker.logprobs(prompt, reply),
                                         strict=True)) / len(reply)
        assert note["gain"] == pytest.approx(gain, abs=2e-3) and note["kept"]
    version = db.scalars(select(AdapterVersion)).one()
    assert version.metrics["summary"]["rollout_tokens"] > 0


@pytest.mark.parametrize("trim", [False, True])
def test_divergence_rollouts_keep_the_students_reply_up_to_where_the_hinted_teacher_leaves_it(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str,
    trim: bool,
) -> None:
    budget = 40
    user, hint = "How does a refrigerator keep food cold?", "Go on and answer the question after it."
    reply = "Imagine a refrigerator as a cold box in your kitchen."
    msgs = [{"role": "user", "content": user}]
    prompt, t_prompt, response = maker.prompt_ids(msgs), maker.prompt_ids(teacher_messages(msgs, hint)), \
        maker.response_ids(reply)
    # read with plain transformers: along the picture the hint lowers no token by a nat and raises no
    # other token the hinted base model prefers by a nat, but that model would not stop after it
    hinted, plain = maker.dist(t_prompt, response), maker.dist(prompt, response)
    ids = torch.tensor(response)[:, None]
    effect = (hinted.gather(-1, ids) - plain.gather(-1, ids))[:-1, 0]
    top = hinted.argmax(-1, keepdim=True)
    rival = (hinted.gather(-1, top) - plain.gather(-1, top))[:-1, 0][(top != ids)[:-1, 0]]
    assert effect.min() > -1.0 and (rival.max() if len(rival) else 0.0) < 1.0 and hinted[-1, response[-1]] < -3.0
    picture = maker.add(db, user, reply, score=-1, hint=hint, params={"max_new_tokens": budget})
    _version(settings, session_factory, db, maker, extra=1, steps=1, opd_mode="token", rollouts=1,
             rollout_from="divergence", rollout_max_tokens=budget, rollout_min_gain=-100.0, rollout_trim=trim)
    db.expire_all()
    # the rollout is the student's picture and then the hinted teacher's own greedy continuation
    (note,) = picture.advantage["rollouts"]
    kept = response[:-1]
    assert note["kept_from"] == len(kept)
    written = _greedy(maker, t_prompt + kept, budget - len(kept))
    assert maker.tokenizer.convert_tokens_to_ids("<|im_end|>") not in written  # it runs into the budget
    after = maker.tokenizer.decode(written, skip_special_tokens=True)
    if trim:  # learned only to the end of its last full sentence
        after = after[:max(after.rfind(mark) for mark in ".!?") + 1]
        assert after
    assert note["text"].rstrip() == (reply + after).rstrip()
    # every rollout starts with as much of its turn's reply as it kept
    for turn in db.scalars(select(Turn).where(Turn.id != picture.id)).all():
        for written in (turn.advantage or {}).get("rollouts", []):
            ids = unpack_ids(turn.response_token_ids)[:written["kept_from"]]
            assert written["text"].startswith(maker.tokenizer.decode(ids, skip_special_tokens=True))


def test_a_rollout_for_a_hint_that_names_an_opening_is_written_after_that_opening(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    budget = 16
    # this turn's hint asks for 'My advice:' and its reply opens otherwise; the greeting turn's reply
    # ("Goodbye.") does not open with the 'Hello Bob' its hint asks for either; a third turn's reply
    # already opens as asked and is continued as usual, from the start of the reply
    user, hint = "What fruit should I eat for breakfast?", "Begin your reply with 'My advice:' and then the advice."
    msgs = [{"role": "user", "content": user}]
    prompt, t_prompt = maker.prompt_ids(msgs), maker.prompt_ids(teacher_messages(msgs, hint))
    phrase = maker.tokenizer("My advice:", add_special_tokens=False)["input_ids"]
    before = sum(maker.logprobs(prompt, phrase))
    asked = maker.add(db, user, "Fruit is a healthy food.", score=-1, hint=hint, params={"max_new_tokens": budget})
    opened = maker.add(db, "Say hello to Ann.", "Hello Ann, nice to meet you.", score=0,
                       hint="Start your reply with 'Hello Ann' and add how you are.")
    # served with no more tokens than the phrase has, a turn leaves the teacher nothing to write: no rollout
    tiny = maker.add(db, "What should I cook tonight?", "Pasta is nice.", score=-1, hint=hint,
                     params={"max_new_tokens": len(phrase)})
    tuned = _train(settings, session_factory, db, maker, model_path, extra=3, opd_mode="token", rollouts=1,
                   rollout_max_tokens=budget, rollout_open_as_asked=True, rollout_min_gain=-100.0,
                   rollout_min_relevance=0.0, rollout_grounding_tokens=0, rollout_trim=False)
    db.expire_all()
    (note,) = asked.advantage["rollouts"]
    written = _greedy(maker, t_prompt + phrase, budget - len(phrase))
    assert note["asked_prefix"] and note["kept_from"] == len(phrase) and note["learned"]
    assert note["text"] == maker.tokenizer.decode(phrase + written, skip_special_tokens=True)
    # the phrase is learned with the rest: the unhinted student finds it likelier after training
    assert sum(maker.logprobs(prompt, phrase, model=tuned)) > before + 1.0
    greeting = db.scalars(select(Turn).where(Turn.response_text == "Goodbye.")).one()
    (note,) = greeting.advantage["rollouts"]
    assert note["asked_prefix"] and note["text"].startswith("Hello Bob")
    (same,) = opened.advantage["rollouts"]
    assert not same["asked_prefix"] and same["kept_from"] == 0
    assert not tiny.advantage.get("rollouts")


def test_with_rollout_asked_splice_the_rollout_is_the_asked_label_then_the_students_own_reply(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    """A hint that asks for a label ('My advice:', 'In short,') gets the label and then the student's own
    reply as its rollout, and the teacher writes nothing; 'Hello Bob' (a HINTED turn) is no label, and the
    teacher still continues it."""
    advice, bottom = ("Begin your reply with 'My advice:' and then the advice.",
                      "Begin your reply with 'In short,' followed by the answer.")
    question = "What should I eat for breakfast?"
    msgs = [{"role": "user", "content": question}]
    spliced = "My advice: Eat oatmeal with fruit."
    target = maker.response_ids(spliced)  # the splice's tokens and the stop
    before = sum(maker.logprobs(maker.prompt_ids(msgs), target))
    labelled = maker.add(db, question, "Eat oatmeal with fruit.", score=-1, hint=advice)
    short = maker.add(db, "Is a standing desk worth it?", "Yes, for most people.", score=-1, hint=bottom)
    tuned = _train(settings, session_factory, db, maker, model_path, extra=2, opd_mode="token", rollouts=1,
                   rollout_max_tokens=16, rollout_open_as_asked=True, rollout_asked_splice=True,
                   rollout_min_gain=-100.0, rollout_min_relevance=0.0, rollout_grounding_tokens=0)
    db.expire_all()
    (note,) = labelled.advantage["rollouts"]
    assert note["spliced"] and note["learned"] and note["text"] == spliced and note["ids"] == target
    (note,) = short.advantage["rollouts"]
    assert note["spliced"] and note["text"] == "In short, yes, for most people."
    greeting = db.scalars(select(Turn).where(Turn.response_text == "Goodbye.")).one()
    (note,) = greeting.advantage["rollouts"]
    assert not note["spliced"] and note["asked_prefix"] and note["text"].startswith("Hello Bob")
    assert sum(maker.logprobs(maker.prompt_ids(msgs), target, model=tuned)) > before + 1.0


def test_with_rollout_splice_gain_label_a_splices_gain_is_read_on_its_label_alone(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    hint, question = "Begin your reply with 'My advice:' and then the advice.", "What should I eat for breakfast?"
    msgs = [{"role": "user", "content": question}]
    label = maker.tokenizer("My advice:", add_special_tokens=False)["input_ids"]
    spliced = maker.add(db, question, "Eat oatmeal with fruit.", score=-1, hint=hint)
    _version(settings, session_factory, db, maker, extra=1, steps=1, opd_mode="token", rollouts=1,
             rollout_max_tokens=16, rollout_open_as_asked=True, rollout_asked_splice=True,
             rollout_splice_gain="label", rollout_min_gain=-100.0, rollout_min_relevance=0.0,
             rollout_grounding_tokens=0)
    db.expire_all()
    (note,) = spliced.advantage["rollouts"]
    assert note["spliced"] and note["ids"][:len(label)] == label
    # the hinted teacher's mean logprob of the label minus the student's (a fresh adapter: the base)
    teacher = maker.logprobs(maker.prompt_ids(teacher_messages(msgs, hint)), label)
    student = maker.logprobs(maker.prompt_ids(msgs), label)
    assert note["gain"] == pytest.approx((sum(teacher) - sum(student)) / len(label), abs=2e-3)


# a reply cut at its budget in its third list item, and a hint that asks for nothing it does not already do
HIKE, SHORTER = "What should I pack for a day hike?", "Way too long. Keep it much shorter."
HIKE_LIST = "My advice:\n1. Pack water.\n2. Pack a snack.\n3. Bring a map and a"
# the student's reply learned up to where it could have stopped (the huge margin: the hint asks for nothing else)
STOP_IN_REPLY = {"opd_mode": "token", "rollouts": 1, "rollout_from": "divergence", "rollout_divergence_margin": 100.0,
                 "rollout_trim": True, "rollout_trim_lists": True, "rollout_drop_cut": True,
                 "rollout_min_gain": -100.0, "rollout_min_relevance": 0.0, "rollout_grounding_tokens": 0}


def _hike_list(maker: TurnMaker, last: str) -> tuple[list[int], list[int]]:
    """HIKE_LIST's tokens as served (cut, no stop), and them through `last` and the whitespace after it (as
    every trim keeps), then the stop."""
    served = maker.response_ids(HIKE_LIST)[:-1]
    end = max(k for k in range(len(served)) if maker.tokenizer.decode(served[:k]).rstrip().endswith(last))
    return served, [*served[:end], maker.tokenizer.convert_tokens_to_ids("<|im_end|>")]


@pytest.mark.parametrize(("stop_in_reply", "share", "last"), [
    (False, 1.0, "snack."), (True, 1.0, "snack."),
    (True, 0.6, "water."),  # within 60% of the budget the first item is the last finished one
])
def test_with_rollout_stop_in_reply_a_reply_that_ran_out_is_learned_up_to_its_last_place_to_stop(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str,
    stop_in_reply: bool, share: float, last: str,
) -> None:
    unbroken = "Hiking is a great way to spend a day outdoors and you will want to bring"
    msgs = [{"role": "user", "content": HIKE}]
    prompt, t_prompt = maker.prompt_ids(msgs), maker.prompt_ids(teacher_messages(msgs, SHORTER))
    served, trimmed = _hike_list(maker, last)
    assert len(trimmed) - 1 <= share * len(served) < len(served) - 5 or share == 1
    stop_before = maker.logprobs(prompt, trimmed)[-1]
    # both ran into their budget
    ran_out = maker.add(db, HIKE, HIKE_LIST, score=-1, hint=SHORTER, cut=True,
                        params={"max_new_tokens": len(served)})
    no_stop = maker.add(db, HIKE, unbroken, score=-1, hint=SHORTER, cut=True,
                        params={"max_new_tokens": len(maker.response_ids(unbroken)) - 1})
    tuned = _train(settings, session_factory, db, maker, model_path, extra=2, **STOP_IN_REPLY,
                   rollout_stop_in_reply=stop_in_reply, rollout_trim_share=share)
    db.expire_all()
    assert not no_stop.advantage.get("rollouts")  # nowhere to stop: nothing to learn
    if not stop_in_reply:
        assert not ran_out.advantage.get("rollouts")
        return
    (note,) = ran_out.advantage["rollouts"]
    assert note["text"].rstrip() == HIKE_LIST[:HIKE_LIST.index(last) + len(last)] and note["learned"]
    assert note["finished"] is True
    assert note["kept_from"] == len(trimmed) - 1  # the teacher's part is the stop alone
    # its gain: the hinted teacher's stop logprob there minus the student's (a fresh adapter: the base)
    assert note["gain"] == pytest.approx(maker.logprobs(t_prompt, trimmed)[-1] - stop_before, abs=2e-3)
    assert maker.logprobs(prompt, trimmed, model=tuned)[-1] > stop_before


def test_rollout_asked_min_gain_screens_the_rollouts_written_after_an_asked_phrase_on_their_own_floor(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    # no rollout clears a gain floor of +100 nats a token, so only the asked rollouts' own floor lets any through
    _version(settings, session_factory, db, maker, steps=1, opd_mode="token", rollouts=1, rollout_max_tokens=8,
             rollout_open_as_asked=True, rollout_min_gain=100.0, rollout_asked_min_gain=-100.0,
             rollout_min_relevance=0.0, rollout_grounding_tokens=0)
    db.expire_all()
    notes = [n for t in db.scalars(select(Turn)) for n in t.advantage.get("rollouts", [])]
    asked = [n for n in notes if n["asked_prefix"]]
    assert len(notes) == len(HINTED) and len(asked) == 1 and asked[0]["text"].startswith("Hello Bob")
    assert asked[0]["learned"] and asked[0]["gain"] < 100.0
    assert not any(n["learned"] for n in notes if not n["asked_prefix"])


def test_with_rollout_stop_in_reply_a_rollout_after_an_asked_phrase_is_never_cut_back_into_the_phrase(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    # the asked phrase ends a sentence; the teacher's three tokens after it are cut at the budget
    hint = "Begin your reply with 'Good news.' and then the fix."
    phrase = maker.tokenizer("Good news.", add_special_tokens=False)["input_ids"]
    asked = maker.add(db, "My sink is leaking, what do I do?", "Leaks are common.", score=-1, hint=hint,
                      params={"max_new_tokens": len(phrase) + 3})
    # the hinted turns' rollouts are capped too: nothing below reads them
    _version(settings, session_factory, db, maker, extra=1, steps=1, opd_mode="token", rollouts=1,
             rollout_max_tokens=len(phrase) + 3, rollout_from="divergence", rollout_trim=True,
             rollout_drop_cut=True, rollout_stop_in_reply=True, rollout_open_as_asked=True,
             rollout_min_gain=-100.0, rollout_min_relevance=0.0, rollout_grounding_tokens=0)
    db.expire_all()
    (note,) = asked.advantage["rollouts"]
    assert note["asked_prefix"] and note["text"].startswith("Good news.")
    assert note["text"].rstrip() != "Good news."  # the phrase alone, an empty answer, is never the rollout
    assert note["finished"] is True or not note["learned"]


def test_rollout_asked_phrase_learns_the_asked_phrase_alone_when_every_rollout_after_it_is_refused(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    msgs = [{"role": "user", "content": "Say hello to Bob."}]
    phrase = maker.tokenizer("Hello Bob", add_special_tokens=False)["input_ids"]
    before = sum(maker.logprobs(maker.prompt_ids(msgs), phrase))
    # no rollout clears a gain floor of +100 nats a token: every one is refused
    tuned = _train(settings, session_factory, db, maker, model_path, opd_mode="token", rollouts=1,
                   rollout_max_tokens=8, rollout_open_as_asked=True, rollout_asked_phrase=True,
                   rollout_min_gain=100.0, rollout_min_relevance=0.0, rollout_grounding_tokens=0)
    db.expire_all()
    notes = [n for t in db.scalars(select(Turn)) for n in t.advantage.get("rollouts", [])]
    alone = [n for n in notes if n.get("phrase_only")]
    # only the greeting's hint names an opening ('Hello Bob'), and its reply ("Goodbye.") does not open so
    assert len(alone) == 1 and alone[0]["learned"] and alone[0]["ids"] == phrase and alone[0]["text"] == "Hello Bob"
    refused = [n for n in notes if not n.get("phrase_only")]
    assert len(refused) == len(HINTED) and not any(n["learned"] for n in refused)
    assert sum(maker.logprobs(maker.prompt_ids(msgs), phrase, model=tuned)) > before + 0.5


def test_with_rollout_drop_cut_a_rollout_cut_at_its_budget_is_stored_but_not_learned(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    # four tokens: the teacher's greeting ends by itself ("Hello Bob."), its other answers are cut
    _version(settings, session_factory, db, maker, steps=1, opd_mode="token", rollouts=1, rollout_max_tokens=4,
             rollout_min_gain=-100.0, rollout_drop_cut=True)
    db.expire_all()
    notes = [n for t in db.scalars(select(Turn)) for n in t.advantage.get("rollouts", [])]
    assert len(notes) == len(HINTED)
    ended = [n for n in notes if n["text"].startswith("Hello Bob")]
    assert len(ended) == 1 and ended[0]["finished"] is True and ended[0]["learned"]
    cut = [n for n in notes if n not in ended]
    assert all(n["finished"] is False and not n["kept"] and not n["learned"] for n in cut)


def test_best_of_sampled_rollouts_learns_only_the_one_the_hint_made_likeliest(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    torch.manual_seed(0)
    _version(settings, session_factory, db, maker, steps=1, opd_mode="token", rollouts=3, rollout_temperature=1.0,
             rollout_max_tokens=12, rollout_pick="best", rollout_min_gain=-100.0)
    db.expire_all()
    turns = db.scalars(select(Turn).order_by(Turn.id)).all()
    learned_somewhere = False
    for turn in turns:
        notes = turn.advantage["rollouts"]
        assert len(notes) == 3  # every sampled rollout is stored for review, learned or not
        kept = [n for n in notes if n["kept"]]
        learned = [n for n in notes if n["learned"]]
        assert len(learned) == (1 if kept else 0)
        if learned:
            learned_somewhere = True
            assert learned[0]["gain"] == max(n["gain"] for n in kept)
            assert 0 < turn.advantage["rollout_tokens"] <= 12  # one rollout's tokens, within its budget
    assert learned_somewhere


def test_with_rollout_complaints_off_a_bare_complaint_gets_no_rollout_but_still_distils(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker
) -> None:
    for k, (user, reply, hint) in enumerate(HINTED):
        maker.add(db, user, reply, score=0, hint=hint, hint_source="correction" if k % 2 else "instruction")
    db.commit()
    config = TrainConfig.from_settings(
        settings, method="opd", teacher="base", steps_per_batch=1, batch_size=len(HINTED), opd_mode="token",
        rollouts=1, rollout_max_tokens=8, rollout_min_gain=-100.0, rollout_complaints=False)
    version = run_train_step(session_factory, settings, config=config)
    assert version is not None and version.metrics["n_opd"] == len(HINTED)  # every hint is distilled
    db.expire_all()
    for turn in db.scalars(select(Turn).order_by(Turn.id)):
        assert turn.advantage["hint_source"] == turn.hint_source
        assert turn.advantage["distilled"] is True  # opd_complaints is on by default
        if turn.hint_source == "correction":
            assert "rollouts" not in turn.advantage and turn.advantage["rollout_tokens"] == 0
        else:
            assert len(turn.advantage["rollouts"]) == 1 and turn.advantage["rollout_tokens"] > 0


@pytest.mark.parametrize("opd_mode", ["token", "topk"])
def test_with_opd_complaints_off_a_bare_complaint_keeps_its_score_and_is_not_distilled(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, opd_mode: str
) -> None:
    for k, (user, reply, hint) in enumerate(HINTED):  # complaints judged -1, instructions +1: baseline 0
        complaint = k % 2 == 1
        maker.add(db, user, reply, score=-1 if complaint else 1, hint=hint,
                  hint_source="correction" if complaint else "instruction")
    db.commit()
    config = TrainConfig.from_settings(
        settings, method="combined", steps_per_batch=1, batch_size=len(HINTED), opd_mode=opd_mode,
        opd_complaints=False)
    version = run_train_step(session_factory, settings, config=config)
    assert version is not None
    db.expire_all()
    notes: dict[str | None, list[dict[str, Any]]] = {"correction": [], "instruction": []}
    for turn in db.scalars(select(Turn).order_by(Turn.id)):
        notes[turn.hint_source].append(turn.advantage)
    assert len(notes["correction"]) == len(notes["instruction"]) == 2
    for note in notes["correction"]:
        assert note["distilled"] is False and note["opd"] == 0.0
        assert note["rl"] < 0  # the judge's -1 still teaches
    for note in notes["instruction"]:
        assert note["distilled"] is True and note["rl"] > 0
        if opd_mode == "token":  # topk mode's loss is a KL, not an advantage on the sampled tokens
            assert note["opd"] != 0.0


def test_a_bare_complaint_with_a_standing_instruction_gets_a_rollout_written_to_both(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker
) -> None:
    standing = "Start your reply with 'Hello Bob'."
    for _ in range(3):  # earlier sessions, already trained on
        maker.add(db, "Say hello to Bob.", "Goodbye.", score=-1, hint=standing, hint_source="instruction",
                  status="trained")
    complaint = maker.add(db, "Greet Bob for me.", "Bob is a name.", score=-1,
                          hint="That doesn't answer my question at all.", hint_source="correction")
    db.commit()
    config = TrainConfig.from_settings(
        settings, method="combined", steps_per_batch=1, batch_size=1, rollouts=1, rollout_max_tokens=8,
        rollout_min_gain=-100.0, rollout_min_relevance=0.0, rollout_grounding_tokens=0,
        rollout_complaints=False, standing_instructions=1)
    version = run_train_step(session_factory, settings, config=config)
    assert version is not None
    db.expire_all()
    note = db.get(Turn, complaint.id).advantage  # type: ignore[union-attr]
    assert note["standing"] == [standing]
    assert len(note["rollouts"]) == 1 and note["rollout_tokens"] > 0


def test_rollouts_learned_in_a_batch_are_replayed_in_the_next(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    cfg = {"opd_mode": "token", "rollouts": 1, "rollout_max_tokens": 8, "rollout_min_gain": -100.0}
    _version(settings, session_factory, db, maker, steps=1, **cfg)
    db.expire_all()
    first = db.scalars(select(Turn).order_by(Turn.id)).all()
    learned = [n for t in first for n in t.advantage["rollouts"] if n["learned"]]
    assert len(learned) == len(HINTED)  # nothing screened out at this gain floor
    for note in learned:  # the stored ids are the rollout the text shows
        assert maker.tokenizer.decode(note["ids"], skip_special_tokens=True) == note["text"]
    _version(settings, session_factory, db, maker, rollout_replay=3, **cfg)  # replayed in each of two steps
    second = db.scalars(select(AdapterVersion).order_by(AdapterVersion.id.desc())).first()
    assert second is not None
    newest = [n for t in reversed(first) for n in t.advantage["rollouts"] if n["learned"]][:3]
    for step in second.metrics["steps"]:
        assert step["replay_tokens"] == sum(len(n["ids"]) for n in newest)
        assert step["replay_loss"] > 0


def test_opd_no_repeat_takes_back_the_teachers_vote_for_a_repeat(maker: TurnMaker, model_path: str) -> None:
    """The hinted teacher copies the hint's phrase: it scores "Hello Bob" said again above the student.
    With opd_no_repeat those repeated tokens lose their positive advantage; the first saying keeps it."""
    messages = [{"role": "user", "content": "Say hello to Bob."}]
    response = maker.response_ids("Hello Bob! Hello Bob! Hello Bob! Hello Bob!")
    sample = Sample(1, maker.prompt_ids(messages), response, [0.0] * len(response), 0,
                    "Start your reply with 'Hello Bob'.", messages)
    again = repeats(response, 3)
    learner = Learner(model_path, TrainConfig(method="opd", device="cpu"))
    off = learner._targets([sample]).opd_adv
    assert (off[again] > 0).any()  # the teacher's copy vote, which the setting takes back
    learner.configure(TrainConfig(method="opd", device="cpu", opd_no_repeat=3))
    on = learner._targets([sample]).opd_adv
    assert (on[again] <= 0).all()
    assert torch.equal(on[~again], off[~again]) and (on[:2] > 0).any()



def test_opd_floor_zero_keeps_only_the_teachers_push_up(maker: TurnMaker, model_path: str) -> None:
    """With opd_floor 0 a hinted reply's tokens the teacher scores under the student get no advantage, and
    those it scores over the student keep theirs exactly."""
    messages = [{"role": "user", "content": "How do I start running?"}]
    response = maker.response_ids("I'm here to help you with running. Run slowly at first.")
    sample = Sample(1, maker.prompt_ids(messages), response, [0.0] * len(response), -1,
                    "Begin your reply with 'My advice:' and then tell me what to do.", messages)
    learner = Learner(model_path, TrainConfig(method="opd", device="cpu"))
    both = learner._targets([sample]).opd_adv
    assert (both < 0).any() and (both > 0).any()
    learner.configure(TrainConfig(method="opd", device="cpu", opd_floor=0.0))
    targets = learner._targets([sample])
    assert torch.equal(targets.opd_adv, both.clamp(min=0))
    assert targets.opd_gap is not None and torch.allclose(targets.opd_gap.clamp(-5.0, 5.0), both)
    logged = _summaries([sample], targets)[0]  # the gap is logged as it was, the floored advantage above it
    assert logged["opd_gap"] == round(float(targets.opd_gap.mean()), 4) < logged["opd"]


def _asked_samples(maker: TurnMaker, replies: list[tuple[str, str, int, str | None]]) -> list[Sample]:
    """One sample per (user message, reply, score, hint); a hinted one's hint is what the user said to do."""
    samples = []
    for k, (user, text, score, hint) in enumerate(replies):
        messages = [{"role": "user", "content": user}]
        response = maker.response_ids(text)
        samples.append(Sample(k, maker.prompt_ids(messages), response, [0.0] * len(response), score, hint,
                              messages, hint_source="instruction" if hint else None))
    return samples


def test_kl_skip_asked_leaves_the_asked_opening_out_of_the_anchor(maker: TurnMaker, model_path: str) -> None:
    """The KL anchor skips a reply's opening where it spells a phrase one of the batch's hints asks to begin
    with, in the hinted reply and in an unhinted one alike, but not the list marks on the lines below it; a
    reply that opens otherwise is anchored whole."""
    asked = "Begin your reply with 'My advice:' and then the advice."
    replies = [("What should I cook tonight?", "My advice: Cook a pasta with tomatoes.", -1, asked),
               ("How do I sleep better?", "My advice:\n\n* Keep the room cool.", 1, None),
               ("How do I start running?", "Run slowly at first, three times a week.", 1, None)]
    samples = _asked_samples(maker, replies)
    learner = Learner(model_path, TrainConfig(method="combined", device="cpu", kl_coef=0.1, kl_skip_asked=True))
    targets = learner._targets(samples)
    assert targets.anchored is not None
    masks = targets.anchored.split([len(s.response_ids) for s in samples])
    for sample, mask, opening in zip(samples, masks, ("My advice:", "My advice:", ""), strict=True):
        skipped = sample.response_ids[:int((~mask).sum())]
        assert maker.tokenizer.decode(skipped).strip() == opening and mask[len(skipped):].all()
    assert learner._step(targets)["kl_anchored_tokens"] == int(targets.anchored.sum())
    # with no hint in the batch nothing says which opening was asked for, so every token is anchored
    assert learner._targets(samples[1:]).anchored is None
    # unless users keep asking for it in other sessions (`standing.recurring_openings`, read by learner.run)
    recurring = learner._targets(samples[1:], frozenset({"my advice"})).anchored
    assert recurring is not None and not recurring[:len(maker.tokenizer.encode("My advice:"))].any()
    learner.configure(TrainConfig(method="combined", device="cpu", kl_coef=0.1))
    assert learner._targets(samples).anchored is None


def test_keep_asked_opening_puts_no_blame_on_the_opening_the_hint_asked_for(
    maker: TurnMaker, model_path: str
) -> None:
    """A reply that opens with the phrase its batch's hints ask for, then goes wrong, is scored -1: with
    keep_asked_opening the opening's tokens get no negative advantage, the rest of the reply keeps it, and a
    well-scored reply's opening keeps its positive advantage. The label alone, with nothing after it, is no
    opening to spare."""
    asked = "Begin your reply with 'My advice:' and then the advice."
    replies = [("What should I cook tonight?", "My advice: My advice: Cook a pasta.", -1, asked),
               ("How do I sleep better?", "My advice: Keep the room cool and dark.", 1, None),
               ("How do I start running?", "My advice:\n\n* Run.", -1, None),
               ("How do I relax?", "My advice:", -1, None)]  # the label alone: nothing followed to blame
    samples = _asked_samples(maker, replies)
    sizes = [len(s.response_ids) for s in samples]
    opening = [len(maker.tokenizer.encode("My advice:"))] * 3  # the space and line break go with what follows
    learner = Learner(model_path, TrainConfig(method="combined", device="cpu"))
    before = learner._targets(samples).advantage.split(sizes)
    assert (before[2] < 0).all()  # unhinted, scored -1 against a batch mean of -1/2
    learner.configure(TrainConfig(method="combined", device="cpu", keep_asked_opening=True))
    targets = learner._targets(samples)
    after = targets.advantage.split(sizes)
    kept = 0
    for k, n in enumerate(opening):
        assert maker.tokenizer.decode(samples[k].response_ids[:n]).strip() == "My advice:"
        assert torch.equal(after[k][n:], before[k][n:])  # what followed the opening is judged as before
        assert torch.equal(after[k][:n], before[k][:n].clamp(min=0))
        kept += int((before[k][:n] < 0).sum())
    # the untrained student writes the label less readily than the hinted teacher, so the teacher's push up
    # on the hinted reply's opening outweighs its -1 and stays; after training it can be the other way round
    assert (before[0][:opening[0]] > 0).all() and torch.equal(after[0][:opening[0]], before[0][:opening[0]])
    assert kept == opening[2]
    assert (after[1] > 0).all()
    assert torch.equal(after[3], before[3]) and (after[3] < 0).all()  # the label alone keeps its blame
    assert targets.opening_kept == kept
    assert learner._step(targets)["opening_kept_tokens"] == kept
    # with no hint in the batch nothing says which opening was asked for, so nothing is kept
    assert learner._targets(samples[1:]).opening_kept == 0


def test_keep_asked_opening_remembers_openings_users_keep_asking_for(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker
) -> None:
    """Once the label is learned, its corrections no longer say it ("That doesn't answer my question at
    all."): the opening is still spared, and left out of the KL anchor, because users asked for it in three
    earlier sessions."""
    for text in ("Begin your reply with 'My advice:' and then the advice.", "Start with 'My advice:' please.",
                 "Begin your reply with 'My advice:' and say it plainly."):  # trained long ago
        maker.add(db, "How do I start running?", "Running is a sport.", score=-1, hint=text,
                  hint_source="instruction", status=TurnStatus.trained)
    for user in ("How do I fix a flat tyre?", "What should I cook tonight?"):
        maker.add(db, user, "My advice: Tyres are round.", score=-1,
                  hint="That doesn't answer my question at all.", hint_source="correction")
    maker.add(db, "How do I sleep better?", "My advice: Keep the room cool.", score=1)
    db.commit()
    # rl: only the scores move the replies, so both corrected openings are pushed down in full without it
    config = TrainConfig.from_settings(settings, method="rl", lr=3e-4, steps_per_batch=1, batch_size=3,
                                       keep_asked_opening=True, kl_coef=0.1, kl_skip_asked=True)
    version = run_train_step(session_factory, settings, config=config)
    assert version is not None and version.n_samples == 3
    step, label = version.metrics["steps"][0], len(maker.tokenizer.encode("My advice:"))
    assert step["opening_kept_tokens"] == 2 * label  # both corrected openings had a -1 to spare
    assert step["kl_anchored_tokens"] == step["response_tokens"] - 3 * label  # every opening left unanchored


def test_rollout_stop_weight_teaches_a_rollouts_stop_harder(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    # the stop-in-reply rollout: the list up to its second item, then the stop
    prompt = maker.prompt_ids([{"role": "user", "content": HIKE}])
    served, trimmed = _hike_list(maker, "snack.")
    stop_before = maker.logprobs(prompt, trimmed)[-1]
    maker.add(db, HIKE, HIKE_LIST, score=-1, hint=SHORTER, cut=True, params={"max_new_tokens": len(served)})
    tuned = _train(settings, session_factory, db, maker, model_path, extra=1, **STOP_IN_REPLY,
                   rollout_stop_in_reply=True, rollout_stop_weight=10.0)
    # the same training at weight 1 raised the stop's logprob by 7.3 nats, at 10 by 10.8
    assert maker.logprobs(prompt, trimmed, model=tuned)[-1] > stop_before + 9.0


def test_unlikelihood_ngram_pushes_down_a_reply_that_says_its_label_again(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    user, looped = "What should I cook tonight?", "My advice:\n\nMy advice:\n\nMy advice:\n\nMy advice:"
    prompt = maker.prompt_ids([{"role": "user", "content": user}])
    reply = maker.response_ids(looped)[:-1]
    again = repeats(reply, 4)
    before = torch.tensor(maker.logprobs(prompt, reply))[again].mean()
    maker.add(db, user, looped, score=-1, hint="Say it once and then the advice.")
    tuned = _train(settings, session_factory, db, maker, model_path, extra=1, opd_mode="token",
                   unlikelihood_ngram=4, w_unlikelihood=5.0)
    # the repeat's tokens averaged -2.09 nats before; the same training without unlikelihood raised
    # them to -1.71 (the hinted teacher favours saying its label again), with it they fell to -2.83
    assert torch.tensor(maker.logprobs(prompt, reply, model=tuned))[again].mean() < before - 0.5


def test_rollout_stop_weight_weighs_a_replayed_rollouts_stop_too(
    settings: Settings, session_factory: sessionmaker[Session], db: Session, maker: TurnMaker, model_path: str
) -> None:
    cfg = {"opd_mode": "token", "rollouts": 1, "rollout_max_tokens": 8, "rollout_min_gain": -100.0}
    first = _train(settings, session_factory, db, maker, model_path, **cfg)
    db.expire_all()
    replayed = replay_rollouts(db, 3)
    eos = set(eos_token_ids(first, maker.tokenizer))
    assert any(ids[-1] in eos for _, ids in replayed)  # "Hello Bob." ends by itself within 8 tokens
    # the first step's replay loss, on the first version's weights: each token's NLL, ten times at a stop
    nll = [(-lp, n == len(ids) - 1 and ids[-1] in eos)
           for prompt, ids in replayed for n, lp in enumerate(maker.logprobs(prompt, ids, model=first))]
    weighted = sum(x * (10.0 if stop else 1.0) for x, stop in nll) / len(nll)
    assert weighted > 1.01 * sum(x for x, _ in nll) / len(nll)  # the weight shows beyond the tolerance below
    _version(settings, session_factory, db, maker, steps=1, rollout_replay=3, rollout_stop_weight=10.0, **cfg)
    second = db.scalars(select(AdapterVersion).order_by(AdapterVersion.id.desc())).first()
    assert second is not None
    assert second.metrics["steps"][0]["replay_loss"] == pytest.approx(weighted, rel=1e-3)
