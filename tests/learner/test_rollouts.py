"""Which teacher rollouts are learned: echoes of the hint or of the conversation, replies beside the
user's request and stock openings the student writes whatever it is asked, are not.

The texts are teacher rollouts and hints seen in a bottomline benchmark run (scripts/rollout_probe.py).
"""

from __future__ import annotations

import pytest
import torch

from learner.config import TrainConfig
from learner.logprobs import pack
from learner.rollouts import (
    NoRepeatInReply,
    Verdict,
    asked_opening,
    asked_opening_text,
    asked_openings,
    divergence,
    failed_checks,
    generate,
    hollow_list,
    opening_grounding,
    pick_best,
    relevance,
    repeated,
    scored,
    screen,
    share_in,
    spliced_text,
    stop_weights,
    trim_to_sentence,
)
from learner.samples import NEUTRAL_REQUEST, Sample, neutral_prompt_ids, opening_request

DEFAULTS = {"min_gain": 0.0, "max_echo": 0.8, "max_copy": 0.5}
MIN_RELEVANCE = TrainConfig().rollout_min_relevance


@pytest.mark.parametrize(("text", "hint", "earlier", "kept"), [
    # the complaint said back
    ("You went off topic, answer the actual question.", "You went off topic, answer the actual question.",
     ["In short, and then the answer."], False),
    # the opener the hint asks for, but with the whole hint quoted after it
    ("In short, you buried the answer. Start with 'In short,' and then the answer.",
     "You buried the answer. Start with 'In short,' and then the answer.", [], False),
    # an earlier reply of the conversation, again
    ("In short, and then the answer.\n\nIn short, and then the answer.", "That doesn't answer my question at all.",
     ["In short, and then the answer."], False),
    # the quoted instruction said back around the opener it asks for
    ("In short, start with \"In short,\" and then the answer.", "Start with 'In short,' and then the answer.", [],
     False),
    # what the hint asks for, in the teacher's own words
    ("In short, you should not.", "You buried the answer. Start with 'In short,' and then the answer.", [], True),
    # a hint that holds the answer may be quoted in part
    ("The capital of France is Paris.", "Answer directly: the capital of France is Paris.", ["I am not sure."], True),
])
def test_echoes_of_the_hint_or_the_chat_are_not_learned(text: str, hint: str, earlier: list[str],
                                                         kept: bool) -> None:
    assert screen(text, hint=hint, earlier=earlier, gain=1.0, **DEFAULTS).kept is kept


def test_a_rollout_the_hint_did_not_make_likelier_is_not_learned() -> None:
    text, hint = "In short, you should not.", "Start with 'In short,'."
    assert screen(text, hint=hint, earlier=[], gain=0.2, **DEFAULTS).kept
    assert not screen(text, hint=hint, earlier=[], gain=-0.1, **DEFAULTS).kept


# Loops the teacher wrote in a steps run (the first two) and replies that only look repetitive.
@pytest.mark.parametrize(("text", "loops"), [
    ("To make a loaf of bread at home, here are the numbered steps:\n\n1. **Preheat the oven**\n2. **Prepare "
     "the dough**\n3. **Bake the bread**\n4. **Bake the bread**\n5. **Bake the bread**\n6. **B", True),
    ("Pack a few essentials like a spare tire, a flashlight, a spare tire, a spare tire, a spare tire, a spare "
     "tire, a spare tire", True),
    ("1. Rinse the pan in hot water.\n2. Dry the pan on the hob.\n3. Rub the pan with a little oil.", False),
    ("In short, I'd suggest you switch to a cheaper internet provider for the office.", False),
    ("Check the filter, then check the hose, then check the bag.", False),
])
def test_a_rollout_that_loops_is_not_learned(text: str, loops: bool) -> None:
    max_repeat = TrainConfig().rollout_max_repeat
    assert (repeated(text) > max_repeat) is loops, repeated(text)
    verdict = screen(text, hint="Number the steps.", earlier=[], gain=1.0, max_repeat=max_repeat, **DEFAULTS)
    assert verdict.kept is not loops and verdict.repeated == pytest.approx(repeated(text))


def test_share_in_counts_word_trigrams() -> None:
    assert share_in("the sky is blue", "The sky is blue today.") == 1.0
    assert share_in("the sky is blue", "the sky was blue") == 0.0
    assert share_in("two words", "two words") == 0.0  # under three words: nothing to compare
    assert share_in("a b c d", "x a b c") == 0.5
    # quotes are not part of a word, inner apostrophes are
    assert share_in("Start with 'In short,' now", 'start with "In short," now') == 1.0
    assert share_in("it doesn't work", "It doesn’t work") == 1.0


def test_pick_best_takes_the_kept_rollout_with_the_highest_gain() -> None:
    verdicts = [Verdict(2.0, 0.9, 0.0, False), Verdict(0.5, 0.0, 0.0, True), Verdict(0.8, 0.0, 0.0, True)]
    assert pick_best(verdicts) == 2  # the higher gain at index 0 was screened out
    assert pick_best([Verdict(1.0, 1.0, 0.0, False)]) is None


# Replies the 135M teacher wrote in benchmark runs (brief and bottomline users), and answers to the
# same training prompts; the request is the conversation's opening user message.
SLEEP = "What's a good way to fall asleep faster?"
HIRE = "Should I hire a contractor or a full-time employee for a six-month project?"
OFF_TOPIC = [
    (SLEEP, "I'm sorry for the misunderstanding, but as a chatbot, I can't help with that. I'm here to help."),
    (SLEEP, "I'm a helpful AI named SmolLM, trained to provide assistance in any language. I can help with "
            "anything, from answering your questions to helping with your problems."),
    (SLEEP, "You're a helpful AI, I'm here to help."),
    (HIRE, "In short, the answer to this question is:"),
    (HIRE, "In short, next time."),
    (HIRE, "You went off topic, answer the actual question."),
]
ON_TOPIC = [
    (SLEEP, "Keep a regular bedtime, skip screens for an hour before bed, and keep the room cool and dark."),
    (SLEEP, "Read a book in bed."),
    (HIRE, "In short, hire a contractor: six months is too short to justify a full-time hire."),
    (HIRE, "In short, a contractor."),
]


@pytest.fixture(scope="module")
def embedder() -> object:
    from core.embeddings import SentenceEmbedder

    return SentenceEmbedder(max_length=256)


def test_replies_beside_the_request_are_not_learned_and_answers_are(embedder: object) -> None:
    texts = [t for _, t in OFF_TOPIC + ON_TOPIC]
    sims = relevance(embedder, texts, [q for q, _ in OFF_TOPIC + ON_TOPIC])
    verdicts = [screen(t, hint="Keep it short.", earlier=[], gain=1.0, relevance=r, min_relevance=MIN_RELEVANCE,
                       **DEFAULTS) for t, r in zip(texts, sims, strict=True)]
    assert [v.kept for v in verdicts] == [False] * len(OFF_TOPIC) + [True] * len(ON_TOPIC), sims
    assert all(v.relevance == r for v, r in zip(verdicts, sims, strict=True))


def test_the_request_is_the_opening_message_not_the_complaint(embedder: object) -> None:
    """Against the latest user message (the complaint) these two would pass; against the request they do not."""
    complaint = "You went off topic, answer the actual question. Can you redo it?"
    messages = [{"role": "user", "content": HIRE}, {"role": "assistant", "content": "Hiring is hard."},
                {"role": "user", "content": complaint}]
    assert opening_request(messages) == HIRE
    texts = ["In short, the answer to this question is:", "You went off topic, answer the actual question."]
    against_complaint = relevance(embedder, texts, [complaint, complaint])
    against_request = relevance(embedder, texts, [HIRE, HIRE])
    assert all(s is not None and s >= MIN_RELEVANCE for s in against_complaint), against_complaint
    assert all(s is not None and s < MIN_RELEVANCE for s in against_request), against_request


def test_no_request_means_no_relevance_check(embedder: object) -> None:
    assert opening_request([{"role": "system", "content": "Be brief."}]) == ""
    assert relevance(embedder, ["Read a book in bed."], [""]) == [None]
    assert screen("Read a book in bed.", hint="x", earlier=[], gain=1.0, relevance=None, min_relevance=0.9,
                  **DEFAULTS).kept


# Openings from the benchmark's recorded rollouts (brief and bottomline users) and answers to the
# same training prompts; the student is the base model, the prompt a first turn.
AVOCADO = "How do I pick a ripe avocado?"
BATTERY = "What should I do if my car battery dies?"
DELEGATE = "Should I delegate a task I could do faster myself?"
STOCK_OPENINGS = [
    (AVOCADO, "I'm here to help you find the perfect ripe avocado. You can find it in the market."),
    (BATTERY, "I'm here to help with your request. Please provide the details of the issue you're facing."),
    (DELEGATE, "I'm sorry for the misunderstanding, but as a chatbot, I'm designed to assist with digital tasks."),
]
ANSWER_OPENINGS = [
    (AVOCADO, "Press it gently near the stem: a ripe avocado gives a little but is not mushy."),
    (BATTERY, "If your car battery dies, don't panic. Call a friend for a jump start."),
    (DELEGATE, "In short, you can delegate a task you could do faster yourself."),
]


def _first_turn(tokenizer: object, question: str) -> Sample:
    messages = [{"role": "user", "content": question}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)  # type: ignore[attr-defined]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
    return Sample(0, list(ids), [], [], 0, "Keep it short.", messages)


def test_a_stock_opening_is_not_grounded_and_an_answer_is(model_path: str) -> None:
    from core.modelload import load_model, load_tokenizer

    tokenizer, model = load_tokenizer(model_path), load_model(model_path, device="cpu", dtype="float32")
    cfg = TrainConfig()
    pairs = STOCK_OPENINGS + ANSWER_OPENINGS
    samples = [_first_turn(tokenizer, q) for q, _ in pairs]
    replies = [tokenizer(t, add_special_tokens=False)["input_ids"] for _, t in pairs]
    real = scored(model, [s.prompt_ids for s in samples], replies, device="cpu", chunk=256)
    neutral = scored(model, [neutral_prompt_ids(tokenizer, s) for s in samples],
                     [r[:cfg.rollout_grounding_tokens] for r in replies], device="cpu", chunk=256)
    grounding = opening_grounding(real, neutral, cfg.rollout_grounding_tokens)
    kept = [screen(t, hint="Keep it short.", earlier=[], gain=1.0, grounding=g, min_grounding=cfg.rollout_min_grounding,
                   **DEFAULTS).kept for (_, t), g in zip(pairs, grounding, strict=True)]
    assert kept == [False] * len(STOCK_OPENINGS) + [True] * len(ANSWER_OPENINGS), grounding


def test_an_answer_in_the_asked_for_form_is_grounded_after_its_opening_phrase(model_path: str) -> None:
    from core.modelload import load_model, load_tokenizer

    tokenizer, model = load_tokenizer(model_path), load_model(model_path, device="cpu", dtype="float32")
    tokens = TrainConfig().rollout_grounding_tokens
    pairs = [(BOULDERING, "My advice:\n\n* Find a climbing gym near you and rent shoes for your first visit."),
             (AVOCADO, "My advice: I'm here to help you find the perfect ripe avocado.")]
    samples = [_first_turn(tokenizer, q) for q, _ in pairs]
    replies = [tokenizer(t, add_special_tokens=False)["input_ids"] for _, t in pairs]
    starts = [asked_opening(r, ADVICE_HINT, tokenizer.decode) for r in replies]
    real = scored(model, [s.prompt_ids for s in samples], replies, device="cpu", chunk=256)
    neutral = scored(model, [neutral_prompt_ids(tokenizer, s) for s in samples],
                     [r[:n + tokens] for r, n in zip(replies, starts, strict=True)], device="cpu", chunk=256)
    floor = TrainConfig().rollout_min_grounding
    from_start = opening_grounding(real, neutral, tokens)
    after_phrase = opening_grounding(real, neutral, tokens, starts)
    assert from_start[0] < floor <= after_phrase[0], (from_start, after_phrase)  # the answer is kept only so
    assert after_phrase[1] < floor, after_phrase  # a stock line after the phrase is still not grounded


def test_opening_grounding_compares_the_first_tokens_only() -> None:
    real = [torch.tensor([-1.0, -1.0, -9.0]), torch.tensor([-2.0])]
    neutral = [torch.tensor([-3.0, -2.0]), torch.tensor([-2.0, -5.0])]
    assert opening_grounding(real, neutral, 2) == [1.5, 0.0]
    real = [torch.tensor([-1.0, -1.0, -4.0, -9.0]), torch.tensor([-2.0])]
    neutral = [torch.tensor([-1.0, -1.0, -6.0, -9.0]), torch.tensor([-2.0, -5.0])]
    assert opening_grounding(real, neutral, 1, starts=[2, 1]) == [2.0, 0.0]  # from each start; none left: 0


ADVICE_HINT = "That reads like a brochure. Begin your reply with 'My advice:' and keep it to the point."
BOULDERING = "How do I get started with bouldering?"


def test_the_asked_for_opening_phrase_is_counted_out_with_what_follows_it(model_path: str) -> None:
    from core.modelload import load_tokenizer

    tokenizer = load_tokenizer(model_path)

    def rest(reply: str, hint: str) -> str:
        ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
        return str(tokenizer.decode(ids[asked_opening(ids, hint, tokenizer.decode):]))

    assert rest("My advice:\n\n* Find a gym.", ADVICE_HINT) == " Find a gym."
    assert rest("in short, yes.", "Start with 'In short,' next time.") == " yes."
    assert rest("Find a gym. My advice: go.", ADVICE_HINT) == "Find a gym. My advice: go."  # not where it opens
    assert rest("My advice: go.", "Give me your advice first.") == "My advice: go."  # nothing quoted
    assert rest("My advice:", ADVICE_HINT) == ""


def test_the_neutral_prompt_keeps_the_system_message_and_drops_the_conversation(model_path: str) -> None:
    from core.modelload import load_tokenizer

    tokenizer = load_tokenizer(model_path)
    messages = [{"role": "system", "content": "You answer in French."}, {"role": "user", "content": AVOCADO},
                {"role": "assistant", "content": "Press it."}, {"role": "user", "content": "Too short."}]
    text = tokenizer.decode(neutral_prompt_ids(tokenizer, Sample(0, [], [], [], 0, "x", messages)))
    assert text.startswith("<|im_start|>system\nYou answer in French.<|im_end|>")
    assert text.endswith(f"<|im_start|>user\n{NEUTRAL_REQUEST}<|im_end|>\n<|im_start|>assistant\n")
    assert AVOCADO not in text and "Press it." not in text and "Too short." not in text


def test_a_rollout_that_writes_the_hint_header_is_not_learned() -> None:
    """Seen in a student run: the teacher wrote the question, then the header of its own context."""
    from learner.samples import HINT_HEADER

    text = "Why do birds migrate?\n\n[user's hint / instruction]\nThe answer is: birds follow food."
    verdict = screen(text, hint="Way too long. Keep it much shorter.", earlier=[], gain=1.0,
                     header=HINT_HEADER.strip(), **DEFAULTS)
    assert verdict.leaked and not verdict.kept
    assert screen("Birds migrate to follow food.", hint="Keep it shorter.", earlier=[], gain=1.0,
                  header=HINT_HEADER.strip(), **DEFAULTS).kept


@pytest.mark.parametrize(("hint", "asked"), [
    ("You never actually told me what to do. Begin your reply with 'My advice:' and then the advice.",
     {"my advice"}),
    ("Start with \"In short,\" and then the answer.", {"in short"}),
    ("Open it with ‘Sure thing!’ please.", {"sure thing"}),
    ("You did not begin with 'In short,' again.", {"in short"}),
    # a phrase to avoid, or one quoted for another reason, asks for no opening
    ("Don't start with 'Certainly'. Just answer.", set()),
    ("Use 'celsius' for the units.", set()),
    ("Keep it much shorter.", set()),
])
def test_the_opening_a_hint_asks_for_is_read_from_its_quoted_phrase(hint: str, asked: set[str]) -> None:
    assert asked_openings(hint) == asked


@pytest.mark.parametrize(("hint", "text"), [
    ("You never actually told me what to do. Begin your reply with 'My advice:' and then the advice.",
     "My advice:"),
    ("Start with \"In short,\" and then the answer.", "In short,"),
    ("Don't start with 'Certainly'. Begin with 'Imagine' and a picture.", "Imagine"),
    ("Use 'celsius' for the units.", None),
])
def test_the_opening_a_hint_asks_for_is_written_as_the_hint_quotes_it(hint: str, text: str | None) -> None:
    assert asked_opening_text(hint) == text


@pytest.mark.parametrize(("phrase", "reply", "spliced"), [
    ("My advice:", "Practice with a friend first.", "My advice: Practice with a friend first."),
    ("In short,", "Yes, it is worth it.\n", "In short, yes, it is worth it."),
    # after a comma the pronoun I and an acronym keep their capitals
    ("In short,", "I would wait a year.", "In short, I would wait a year."),
    ("In short,", "I'd wait.", "In short, I'd wait."),
    ("In short,", "NASA says no.", "In short, NASA says no."),
    # 'Imagine' starts a sentence only the teacher can go on with; an empty reply has nothing to keep
    ("Imagine", "A loan is money you borrow.", None),
    ("My advice:", "  ", None),
])
def test_a_splice_is_the_asked_label_then_the_students_own_reply(phrase: str, reply: str, spliced: str | None) -> None:
    assert spliced_text(phrase, reply) == spliced


# From an advice run: the hinted teacher's stock line passed relevance (0.73) and grounding (0.63).
@pytest.mark.parametrize(("text", "kept"), [
    ("I'm glad you asked for my advice. It's a great way to start your conversation, and I'm here to help.",
     False),
    ("My advice: book the cheaper flight and spend the difference on the hotel.", True),
    ("**My advice:** book the cheaper flight.", True),
])
def test_a_rollout_that_ignores_the_opening_its_hint_asks_for_is_not_learned(text: str, kept: bool) -> None:
    hint = "I asked what you'd recommend. Begin your reply with 'My advice:' and say it plainly."
    verdict = screen(text, hint=hint, earlier=[], gain=1.0, asked_opening=True, **DEFAULTS)
    assert verdict.opens_as_asked is kept and verdict.kept is kept
    # off, or for a hint that names no opening, the check is not made
    assert screen(text, hint=hint, earlier=[], gain=1.0, **DEFAULTS).kept
    unchecked = screen(text, hint="Say it plainly.", earlier=[], gain=1.0, asked_opening=True, **DEFAULTS)
    assert unchecked.opens_as_asked is None and unchecked.kept


# From an advice run: this rollout was learned at v4; at v7, 5 of 8 advice held-out replies doubled the label.
@pytest.mark.parametrize(("text", "again"), [
    ('My advice: "My advice: Bring a dessert to a dinner party."', True),
    ("My advice:\n\n* My advice: call her first.", True),
    ("My advice: bring a lemon tart; it travels well.", False),
    ("My advisor says bring a tart. My advice: bring a lemon tart.", False),  # does not open as asked
])
def test_a_rollout_that_says_the_asked_for_opening_twice_is_not_learned(text: str, again: bool) -> None:
    hint = "Begin your reply with 'My advice:' and then the advice."
    verdict = screen(text, hint=hint, earlier=[], gain=1.0, asked_opening=True, asked_once=True, **DEFAULTS)
    assert verdict.asked_again is again
    assert verdict.kept is (not again and bool(verdict.opens_as_asked))
    # off, the doubled phrase is not looked for; for a hint that names no opening, there is nothing to look for
    assert screen(text, hint=hint, earlier=[], gain=1.0, **DEFAULTS).asked_again is None
    assert screen(text, hint="Say it plainly.", earlier=[], gain=1.0, asked_once=True, **DEFAULTS).asked_again is None


NONE = float("-inf")  # the hinted teacher's likeliest token is the reply's own


@pytest.mark.parametrize(("hint_effect", "rival_effect", "stop", "expected"), [
    # the hint lowers the third token by more than the margin: the rollout leaves the reply there
    ([0.1, -0.4, -1.5, -3.0, 8.0], [NONE, 0.5, NONE, NONE, NONE], -0.2, 2),
    # the hinted teacher prefers another first token, and the hint is why: a fresh rollout
    ([-0.4, 0.0, 0.0, 0.0, 8.0], [2.5, NONE, NONE, NONE, NONE], -0.2, 0),
    # it prefers another token the hint barely raised (its own taste, not the hint's): keep going
    ([-0.4, 0.0, 0.0, 0.0, 8.0], [0.3, 0.9, NONE, NONE, NONE], -0.2, 5),
    # nothing asked for, but the hinted teacher would not have stopped: continue the whole reply
    ([2.0, -0.9, 0.5, 0.0, 8.0], [NONE] * 5, -5.9, 4),
    # a reply cut at its token budget has no end of its own to judge
    ([2.0, -0.9, 0.5, 0.0, 8.0], [NONE] * 5, None, 5),
    # something asked for comes before the end
    ([0.0, 0.0, 0.0, -2.0, 8.0], [NONE] * 5, -5.9, 3),
])
def test_a_rollout_keeps_the_reply_up_to_the_first_token_where_the_hint_asks_for_something_else(
        hint_effect: list[float], rival_effect: list[float], stop: float | None, expected: int) -> None:
    assert divergence(torch.tensor(hint_effect), torch.tensor(rival_effect), margin=1.0, stop_logprob=stop,
                      stop_floor=-3.0) == expected


def test_a_continued_reply_is_checked_for_loops_in_what_the_teacher_wrote() -> None:
    # from an analogy run: the student's picture, then the teacher's answer after it, which names the
    # picture's words again; over the whole text that read as a loop
    picture = "Imagine a device that converts sunlight into electricity."
    answer = (" This device is called a solar panel. The process of converting sunlight into electricity is called "
              "photovoltaics.\n\nThe process of solar panels is a clean and sustainable way to generate electricity. "
              "It uses a device that captures sunlight and uses it to generate electricity. This device is called")
    max_repeat = TrainConfig().rollout_max_repeat
    assert repeated(picture + answer) > max_repeat
    kept = screen(picture + answer, hint="Finish the picture and then explain.", earlier=[], gain=1.0,
                  max_repeat=max_repeat, written=answer, **DEFAULTS)
    assert kept.kept and kept.repeated == pytest.approx(repeated(answer))
    # the same run's other continuation repeats itself: still a loop
    picture = "Imagine a microwave, a device that can heat food."
    looped = (" The microwave is a device that uses electromagnetic energy to cook food. It works by converting "
              "electrical energy into mechanical energy, which is then used to heat food. The microwave is a device "
              "that can heat food, but it's not a device that can heat water.")
    assert not screen(picture + looped, hint="Go on and answer the question after it.", earlier=[], gain=1.0,
                      max_repeat=max_repeat, written=looped, **DEFAULTS).kept


WORDS = ["Imagine", " a", " pipe", ".", " Data", " flows", " like", " water", "!", " It", " moves", "<end>"]


def _decode(ids: list[int]) -> str:
    return "".join(WORDS[i] for i in ids)


@pytest.mark.parametrize(("reply", "start", "expected"), [
    # cut at its budget mid-sentence: up to the last full sentence, then the end token
    ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0, [0, 1, 2, 3, 4, 5, 6, 7, 8, 11]),
    # the last full sentence must be the teacher's: the student's own picture is not cut into
    ([0, 1, 2, 3, 9, 10], 4, [0, 1, 2, 3, 9, 10]),
    ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 4, [0, 1, 2, 3, 4, 5, 6, 7, 8, 11]),
    # a rollout that ended by itself is learned as written
    ([0, 1, 2, 3, 9, 10, 11], 0, [0, 1, 2, 3, 9, 10, 11]),
])
def test_a_rollout_cut_at_its_budget_is_learned_to_its_last_full_sentence(
        reply: list[int], start: int, expected: list[int]) -> None:
    assert trim_to_sentence(reply, start=start, decode=_decode, eos_ids=[11, 99]) == expected


def test_a_cut_rollout_trimmed_within_a_share_of_its_budget_stops_at_the_last_place_before_it() -> None:
    # "Imagine a pipe. Data flows like water! It moves" cut at 11 tokens: the last stop is at 9 tokens,
    # within the first 8 only the first sentence ends; within the first 3 none does, and it stays cut
    reply = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert trim_to_sentence(reply, start=0, decode=_decode, eos_ids=[11], limit=11) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 11]
    assert trim_to_sentence(reply, start=0, decode=_decode, eos_ids=[11], limit=8) == [0, 1, 2, 3, 11]
    assert trim_to_sentence(reply, start=0, decode=_decode, eos_ids=[11], limit=3) == reply


def test_with_finished_too_a_rollout_that_ended_past_the_share_is_trimmed_within_it() -> None:
    # "Imagine a pipe. Data flows like water!" and its stop: 9 words and the stop
    ended = [0, 1, 2, 3, 4, 5, 6, 7, 8, 11]
    assert trim_to_sentence(ended, start=0, decode=_decode, eos_ids=[11], limit=8) == ended
    assert trim_to_sentence(ended, start=0, decode=_decode, eos_ids=[11], limit=8, finished_too=True) == [
        0, 1, 2, 3, 11]
    # its words fit the share: learned as written, and so is one with no place to stop within it
    assert trim_to_sentence(ended, start=0, decode=_decode, eos_ids=[11], limit=9, finished_too=True) == ended
    assert trim_to_sentence(ended, start=0, decode=_decode, eos_ids=[11], limit=3, finished_too=True) == ended
    # a finished list past the share keeps its items that end within it
    listed = [0, 1, 2, 3, 4, 1, 5, 6, 7, 1, 8, 9, 10]
    assert trim_to_sentence(listed, start=1, decode=_decode_list, eos_ids=[10], list_items=True, limit=9,
                            finished_too=True) == [0, 1, 2, 3, 4, 1, 5, 6, 7, 10]


LIST = ["My advice:", "\n", "1.", " Save", " first", "2.", " Cut", " costs", " Spend", " less.", "<end>"]


def _decode_list(ids: list[int]) -> str:
    return "".join(LIST[i] for i in ids)


@pytest.mark.parametrize(("reply", "list_items", "expected"), [
    # "My advice:\n1. Save first\n2. Cut costs\n" cut there: the last finished item is "2. Cut costs"
    ([0, 1, 2, 3, 4, 1, 5, 6, 7, 1], True, [0, 1, 2, 3, 4, 1, 5, 6, 7, 10]),
    # the item the budget cut has no next line yet: trimmed to the one before it
    ([0, 1, 2, 3, 4, 1, 5, 6, 7], True, [0, 1, 2, 3, 4, 10]),
    # without list_items a list with no full stop is left as cut
    ([0, 1, 2, 3, 4, 1, 5, 6, 7, 1], False, [0, 1, 2, 3, 4, 1, 5, 6, 7, 1]),
    # a sentence inside an item still counts (the whitespace after it stays, as it always has), and a
    # bare next number is no sentence end
    ([0, 1, 2, 3, 8, 9, 1, 2], False, [0, 1, 2, 3, 8, 9, 1, 10]),
    ([0, 1, 2, 3, 8, 9, 1, 2], True, [0, 1, 2, 3, 8, 9, 1, 10]),
    # a mark with no text after it is no item
    ([0, 1, 2, 1, 5, 6], True, [0, 1, 2, 1, 5, 6]),
])
def test_a_cut_list_is_trimmed_to_its_last_finished_item_and_never_to_a_bare_number(
        reply: list[int], list_items: bool, expected: list[int]) -> None:
    assert trim_to_sentence(reply, start=1, decode=_decode_list, eos_ids=[10], list_items=list_items) == expected


def test_a_cut_rollout_is_not_learned_when_asked() -> None:
    text = "My advice: save first, then"
    assert screen(text, hint="Begin with 'My advice:'.", earlier=[], gain=1.0, **DEFAULTS).kept
    assert screen(text, hint="Begin with 'My advice:'.", earlier=[], gain=1.0, finished=True, **DEFAULTS).kept
    cut = screen(text, hint="Begin with 'My advice:'.", earlier=[], gain=1.0, finished=False, **DEFAULTS)
    assert not cut.kept and failed_checks(cut, **DEFAULTS, min_relevance=0.0, min_grounding=0.0) == ["cut"]


@pytest.mark.parametrize(("text", "hollow"), [
    # learned in a share75 advice run (seed 1); held-out replies of this shape followed
    ("My advice:\n\n* Use a good recipe:\n* Choose a good pot:\n* Make it yourself:\n", True),
    ("My advice:\n\n* **Start your day right:**\n* **Make your morning routine:**\n", True),
    ("My advice:\n\n1. Timing:\n2. Ripeness:", True),
    # a lead-in, the label again, other marks, bold and Windows line ends say nothing either
    ("My advice: focus on these:\n\n* A piece of fruit:\n* A handful of nuts:", True),
    ("My advice:\n\n* Plan:\n\nMy advice:\n\n* Pack:\n", True),
    ("**My advice:**\n\n+ Use a good recipe:\n### Choose a good pot:\n**Bake it:**\n**1. Eat it:**", True),
    ("My advice:\r\n\r\n* __Use a good recipe:__\r\n", True),
    # a heading with something under it, or an item that says something
    ("My advice:\n1. **Timing:** The timing of the mango's ripening matters.", False),
    ("My advice:\n\n* Timing:\nPick it when it smells sweet.", False),
    ("My advice:\n\n1. **Be a team player**:\n   * Listen first", False),
    ("My advice:\n\n* Practice regularly: the more you practice, the more you improve.\n", False),
    # something said before or after the headings: accepted, however little it says
    ("My advice: keep it simple.\n\n* Recipe:\n* Pot:", False),
    ("My advice:\n\n* **Set a deadline:**\n* **Keep a journal:**\n\nRemember to have fun.", False),
    # no list at all
    ("My advice: Boil the carrots until they're soft.", False),
    ("In short, yes:", False),
])
def test_a_list_of_headings_alone_is_hollow(text: str, hollow: bool) -> None:
    assert hollow_list(text) is hollow


def test_a_hollow_list_is_not_learned_when_asked() -> None:
    text, hint = "My advice:\n\n* Use a good recipe:\n* Choose a good pot:\n", "Begin with 'My advice:'."
    assert screen(text, hint=hint, earlier=[], gain=1.0, **DEFAULTS).kept
    assert screen(text, hint=hint, earlier=[], gain=1.0, **DEFAULTS).hollow is None
    refused = screen(text, hint=hint, earlier=[], gain=1.0, hollow_lists=True, **DEFAULTS)
    assert not refused.kept and failed_checks(refused, **DEFAULTS, min_relevance=0.0, min_grounding=0.0) == ["hollow"]
    said = screen("My advice:\n\n* Use a good recipe: one with weights.\n", hint=hint, earlier=[], gain=1.0,
                  hollow_lists=True, **DEFAULTS)
    assert said.kept and said.hollow is False


def test_no_repeat_bans_only_what_would_repeat_an_ngram_of_the_reply_itself() -> None:
    """Row 0's reply "1 2 3 1 2" may not go on with 3; row 1's reply ends "5 6", which follows "5 6 7"
    only in the prompt (a hint may quote what the reply should say), so 7 stays allowed."""
    prompt = [5, 6, 7, 9]
    ids = torch.tensor([prompt + [1, 2, 3, 1, 2], prompt + [4, 8, 0, 5, 6]])
    scores = NoRepeatInReply(3, start=len(prompt))(ids, torch.zeros(2, 10))
    assert torch.isinf(scores[0]).nonzero().flatten().tolist() == [3]
    assert not torch.isinf(scores[1]).any()
    with pytest.raises(ValueError):
        NoRepeatInReply(1, start=0)


def test_a_rollout_written_with_no_repeat_holds_no_ngram_twice(model_path: str) -> None:
    from core.modelload import eos_token_ids, load_model, load_tokenizer

    tokenizer, model = load_tokenizer(model_path), load_model(model_path, device="cpu", dtype="float32")
    chats = [[{"role": "user", "content": "How do I get better at rock climbing? Begin your reply with "
                                          "'My advice:' and then the advice."}],
             [{"role": "user", "content": "List ten things to pack for a beach day."}]]
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    prompts = [list(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    replies = generate(model, prompts, [64, 64], eos_ids=eos_token_ids(model, tokenizer),
                       pad_id=tokenizer.pad_token_id, temperature=0.0, device="cpu", no_repeat=4)
    for reply in replies:
        grams = [tuple(reply[i:i + 4]) for i in range(len(reply) - 3)]
        assert len(grams) == len(set(grams)), tokenizer.decode(reply)
        assert len(reply) > 20


@pytest.mark.parametrize(("reply", "start", "expected"), [
    # the student wrote "My advice:\n1." and the teacher " Save first": the item is the student's mark
    # and the teacher's text, finished when the next token starts a line
    ([0, 1, 2, 3, 4, 1, 6], 3, [0, 1, 2, 3, 4, 10]),
    # and the item is still finished when the student wrote its first word too
    ([0, 1, 2, 3, 4, 1, 6], 4, [0, 1, 2, 3, 4, 10]),
])
def test_where_a_list_item_begins_is_read_from_the_whole_reply_not_the_teachers_part(
        reply: list[int], start: int, expected: list[int]) -> None:
    assert trim_to_sentence(reply, start=start, decode=_decode_list, eos_ids=[10], list_items=True) == expected


def test_stop_weights_weigh_each_rollouts_closing_stop_and_nothing_else() -> None:
    eos = {2}
    # a rollout that stops, one cut at its budget, one whose stop is its only token, one with a stop inside
    packed = pack([[7], [7, 8], [9], [7]], [[5, 6, 2], [5, 6], [2], [2, 5, 2]], "cpu")
    weights = stop_weights(packed, eos, 8.0)
    assert weights.tolist() == [1, 1, 8, 1, 1, 8, 1, 1, 8]
    assert stop_weights(packed, eos, 0.0).tolist() == [1, 1, 0, 1, 1, 0, 1, 1, 0]
