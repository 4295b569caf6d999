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

Not every rollout is worth learning. A small teacher given a complaint ("You went off topic.")
often says the complaint back, repeats an earlier reply of the conversation, or falls back on a
stock reply the student already writes; learning those teaches nothing from the hint and sharpens
the student's worst habits. `screen` drops a rollout that repeats most of the hint (`max_echo`: the
share of the hint's word trigrams found in the rollout; a hint that holds the answer may still be
partly quoted), that mostly repeats earlier assistant replies (`max_copy`: the share of the
rollout's word trigrams found in them), or that the hint did not make more likely (`min_gain`:
the mean teacher-minus-student logprob per token).

Neither check sees a reply that is fluent, new and beside the point: "I'm sorry for the
misunderstanding, but as a chatbot ...", "In short, the answer to this question is:". With
`min_relevance` above 0, a rollout must also be about what the user asked: the cosine similarity of
its all-MiniLM-L6-v2 embedding to the conversation's opening user message must reach the threshold
(`relevance`). The opening message, not the latest: on a redo turn the latest user message is the
complaint, and a reply that talks about the complaint ("In short, the answer to this question is:"
after "answer the actual question") or says it back scores high against it (0.35 and 0.81 in
tests/learner/test_rollouts.py) and low against the request (0.11, 0.02). The cost: a rollout for
a new request made later in the conversation is compared with the first one and is usually
dropped, so the screen errs toward learning less. Learning off-topic replies taught the student
to stop answering in the benchmark's runs; the screen never scores the student, so it only
decides which teacher replies are learned.

A stock opening can still name the topic ("I'm here to help you find the perfect ripe avocado.",
"I'm sorry for the misunderstanding, but as a chatbot, I'm designed to ..."), and learned without
the hint it teaches the student to open every answer that way. With `grounding_tokens` above 0, a
rollout's opening must depend on the conversation: over its first `grounding_tokens` tokens, the
student's mean logprob after the real prompt minus after a neutral one (the system messages, tools
as the teacher prompt passes them, and "Can you help me with something?") must reach
`min_grounding` (`grounding`, in nats per token). On the benchmark's recorded rollouts a stock
opening scored at most 0.46, a learned answer's opening 0.86 and up. The cost: a short answer
whose words fit any question ("In short, yes: it frees your time for work only you can do."
scored 0.19) is dropped too.

A rollout that writes the header the hint was introduced with ("[user's hint / instruction]") is
the teacher continuing its own context, not answering; it is never learned.

A correction often names one part of a reply ("Explain how it works after the comparison."), and a
teacher that writes the whole reply afresh also rewrites the parts the user kept: in the analogy
user's runs, the base teacher answered such corrections without the "Imagine" picture the student
had learned, and the student unlearned it. With `rollout_from` "divergence", the rollout keeps the
student's own reply up to the first token where the hint asks for something else (`divergence`), or all of it but
its end when the hinted teacher would not have stopped there, and the teacher writes only the rest;
its gain is measured over the part the teacher wrote.

A rollout that runs into its token budget ends mid-sentence with no stop, and learned as cut it
teaches the student to go on wherever it could have stopped; the budget then cuts the student off as
well (analogy's and bottomline's held-out replies in the divergence runs). With `rollout_trim`, such
a rollout is learned up to its last full sentence and then stops (`trim_to_sentence`); with
`rollout_trim_lists` the end of its last finished list item counts too, since a numbered list with no
full stops (advice's teacher writes them after "My advice:") has no sentence end to stop at. With
`rollout_drop_cut`, a rollout still cut after that is not learned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import torch

from learner.logprobs import Packed, pack, token_stats

# A word keeps its inner apostrophes ("doesn't") but not the quotes around it: a hint that quotes
# 'In short,' must share trigrams with a rollout that writes In short, unquoted.
WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


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
    no_repeat: int = 0,
) -> list[list[int]]:
    """One reply per prompt from `model` as it is (the caller picks the weights), batched.

    Left-padded so every row's next token comes from the same column; each reply is cut after its
    first end-of-sequence token (kept, so the student also learns where the teacher stops) and at
    its own token budget. With `no_repeat` n > 1 no reply repeats a token n-gram of what it wrote
    (`NoRepeatInReply`); a prompt's tail (a student prefix a divergence rollout continues) is not
    counted, as `repeated` only checks what the teacher wrote.
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
    if no_repeat > 1:
        from transformers import LogitsProcessorList

        sampling["logits_processor"] = LogitsProcessorList([NoRepeatInReply(no_repeat, start=width)])
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


class NoRepeatInReply:
    """A logits processor that bans every token which would repeat an n-gram of the reply so far.

    The 135M teacher falls into loops ("The more you practice, the more you will improve. The more
    you learn ...") that `repeated` then rejects, so a hint whose teacher always loops teaches
    nothing. transformers' own `no_repeat_ngram_size` counts the prompt too, and would ban the very
    phrase a hint quotes ("Begin your reply with 'My advice:'"); this counts only what the reply
    wrote from column `start` on (one column for every left-padded row).
    """

    def __init__(self, n: int, *, start: int) -> None:
        if n < 2:
            raise ValueError(f"n={n}: an n-gram ban needs n >= 2")
        self.n, self.start = n, start

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        k = self.n - 1
        for row, reply in enumerate(input_ids[:, self.start:].tolist()):
            if len(reply) < self.n:
                continue
            tail = reply[-k:]
            banned = [reply[i + k] for i in range(len(reply) - k) if reply[i:i + k] == tail]
            if banned:
                scores[row, banned] = float("-inf")
        return scores


def words(text: str) -> list[str]:
    """Lower-cased words, curly apostrophes read as straight ones."""
    return WORD.findall(text.lower().replace("’", "'"))


def word_trigrams(items: list[str]) -> list[tuple[str, ...]]:
    return [tuple(items[i:i + 3]) for i in range(len(items) - 2)]


def trigrams(text: str) -> set[tuple[str, ...]]:
    return set(word_trigrams(words(text)))


# A quoted phrase: 'In short,' or "My advice:" (straight or curly quotes), after a space or bracket.
QUOTED = re.compile(r"""(?:^|[\s(])['"‘“]([^'"‘’“”]{1,60}?)['"’”](?=[\s.,;:!?)]|$)""")


def normalized_phrase(quote: str) -> str:
    """A quoted phrase as replies are matched against it: lowercased, trailing punctuation and spaces dropped."""
    return quote.strip().rstrip(",.:;!?").strip().lower()


def quoted(text: str) -> set[str]:
    """The phrases `text` quotes (see `normalized_phrase`)."""
    return {normalized_phrase(q) for q in QUOTED.findall(text)} - {""}


# "Begin your reply with 'My advice:'", "Start with "In short,"", "open it with 'Sure thing!'": the verb, at
# most six words, then "with" and the quoted phrase. A negative imperative earlier in the sentence ("Don't
# start with 'Certainly'") asks for the opposite; a complaint ("You did not begin with 'In short,'") does not.
ASKED_OPENING = re.compile(
    r"""\b(?:begin|start|open|lead)\w*(?:\s+[\w']+){0,6}?\s+with\s+['"‘“]([^'"‘’“”]{1,60}?)['"’”]""", re.I)
NEGATED = re.compile(r"\b(?:don't|dont|do not|never|stop|avoid)\b", re.I)
LEADING_MARKS = " \t\n*_#>\"'‘“`"


def _asked(hint: str) -> list[str]:
    """The phrases `hint` asks a reply to begin with, as it writes them, in order."""
    return [m.group(1) for sentence in re.split(r"(?<=[.!?])\s+", hint)
            for m in ASKED_OPENING.finditer(sentence) if not NEGATED.search(sentence[:m.start()])]


def asked_openings(hint: str) -> set[str]:
    """The phrases `hint` asks a reply to begin with (see `normalized_phrase`)."""
    return {normalized_phrase(q) for q in _asked(hint)} - {""}


def asked_opening_text(hint: str) -> str | None:
    """The first phrase `hint` asks a reply to begin with, as the hint writes it, its case and closing
    punctuation kept ('My advice:', 'In short,'); None when it asks for none."""
    return next((q.strip() for q in _asked(hint) if normalized_phrase(q)), None)


# A phrase after which any answer may follow: a label closed by a colon or a comma ('My advice:', 'In short,').
LABEL_END = (":", ",")
# A reply's first word that keeps its capital after a comma: the pronoun I and its contractions, an acronym.
KEEPS_CAPITAL = re.compile(r"^(I\b|I['’]|[A-Z]{2,}\b)")


def spliced_text(phrase: str, reply: str) -> str | None:
    """The student's reply as the hint asks it to open: `phrase`, a space, then the reply as written (after a
    comma its first letter lowered unless its first word keeps a capital). None for an empty reply, and for
    a phrase that does not end in a colon or a comma: 'Imagine' starts a sentence whose next words must
    continue it, which only the teacher can write."""
    phrase, reply = phrase.strip(), reply.strip()
    if not reply or not phrase.endswith(LABEL_END):
        return None
    if phrase.endswith(",") and not KEEPS_CAPITAL.match(reply):
        reply = reply[0].lower() + reply[1:]
    return f"{phrase} {reply}"


def opens_as_asked(text: str, hint: str) -> bool | None:
    """Whether `text` begins (past markdown marks and quotes) with a phrase the hint asks a reply to begin
    with; None when the hint asks for no opening."""
    asked = asked_openings(hint)
    if not asked:
        return None
    start = text.lstrip(LEADING_MARKS).lower()
    return any(start.startswith(p) for p in asked)


def says_asked_again(text: str, hint: str) -> bool | None:
    """Whether `text` says a phrase the hint asks a reply to begin with more than once ('My advice: "My
    advice: ...'); None when the hint asks for no opening. The hinted teacher copies the quoted phrase out
    of its context, and a student that learns such a rollout says the phrase twice too."""
    asked = asked_openings(hint)
    if not asked:
        return None
    lower = text.lower()
    return any(len(re.findall(rf"(?<!\w){re.escape(p)}(?!\w)", lower)) > 1 for p in asked)


def share_in(text: str, source: str) -> float:
    """Share of `text`'s word trigrams that also occur in `source` (0 for text under three words)."""
    grams = trigrams(text)
    return len(grams & trigrams(source)) / len(grams) if grams else 0.0


def repeated(text: str) -> float:
    """Share of `text`'s word trigrams that repeat one earlier in it: a degenerate loop ("3. Bake the
    bread 4. Bake the bread 5. ...", "a spare tire, a spare tire") scores high, prose near 0. List
    numbers are not words here, or they would make each looped line new."""
    grams = word_trigrams([w for w in words(text) if not w.isdigit()])
    return 1 - len(set(grams)) / len(grams) if grams else 0.0


# a list item's or heading's line: a list mark (bold allowed before it, "**1. Timing:**"), a markdown
# heading's, or bold from the line's start ("**Timing:**")
ITEM_LINE = re.compile(r"^\s*(?:[*_]*(?:\d+[.)]|[-*+\u2022]|#{1,6})\s+\S|(?:\*\*|__)\S)")


def hollow_list(text: str) -> bool:
    """Whether `text` is headings with nothing under them: it has a list item or heading (`ITEM_LINE`),
    and every line ends with a colon, bold and italic marks aside ("My advice:\n\n* Use a good
    recipe:\n* Choose a good pot:"). Such a rollout met advice's rule, and the student learned to name
    topics and say nothing about them. A line that says something, before, under or after the headings ("1.
    **Timing:** pick it ripe", "   * Listen first", "Remember to have fun."), makes it not hollow; so
    `bench.learn.rules.headings_only` reads the advice user's replies too."""
    lines = [line for line in text.splitlines() if line.strip(" \t*_")]
    return (any(ITEM_LINE.match(line) for line in lines)
            and all(line.rstrip(" \t*_").endswith((":", "\uff1a")) for line in lines))


@dataclass(frozen=True)
class Verdict:
    gain: float  # mean teacher-minus-student logprob per rollout token
    echo: float  # share of the hint's trigrams the rollout repeats
    copied: float  # share of the rollout's trigrams found in earlier assistant replies
    kept: bool
    relevance: float | None = None  # similarity to the opening user message (None: not checked)
    grounding: float | None = None  # how much likelier the conversation makes the opening (None: not checked)
    leaked: bool = False  # the rollout writes the teacher context's hint header
    repeated: float = 0.0  # share of its own trigrams the rollout repeats (a loop)
    opens_as_asked: bool | None = None  # begins with the phrase the hint asks for (None: not checked)
    asked_again: bool | None = None  # says the phrase the hint asks to begin with twice (None: not checked)
    finished: bool | None = None  # ends with the end-of-sequence token, not cut at its budget (None: not checked)
    hollow: bool | None = None  # lists only headings with nothing under them (None: not checked)


def screen(text: str, *, hint: str, earlier: list[str], gain: float, min_gain: float, max_echo: float,
          max_copy: float, relevance: float | None = None, min_relevance: float = 0.0,
          grounding: float | None = None, min_grounding: float = 0.0, header: str = "",
          max_repeat: float = 1.0, written: str | None = None, asked_opening: bool = False,
          asked_once: bool = False, finished: bool | None = None, hollow_lists: bool = False) -> Verdict:
    """Whether a rollout is learned: the hint made it likelier, it is no echo of the hint or the chat,
    (each when given) it is about what the user asked and its opening depends on it, it does not
    write the `header` that introduced the hint in the teacher's context, and it does not loop.
    `written` is the part the teacher wrote when the rollout continues the student's reply (the whole
    text by default): a loop is looked for there, since an answer that names again what the picture
    before it named ("Imagine a microwave, a device that heats food. The microwave is a device that
    ...") is no loop. With `asked_opening`, a rollout for a hint that names the phrase a reply must begin
    with ("Begin your reply with 'My advice:'") must begin with it: the teacher did not do what it was
    asked, and a fluent reply that ignores the hint ("I'm glad you asked for my advice. ...") teaches the
    student the teacher's habits, not the user's preference. With `asked_once`, such a rollout must not say
    the phrase a second time. A rollout `finished` False (cut at its budget) is not learned. With
    `hollow_lists`, a rollout that lists only headings (`hollow_list`) is not learned either."""
    verdict = Verdict(gain, share_in(hint, text), share_in(text, "\n".join(earlier)), False, relevance, grounding,
                      bool(header) and header in text, repeated(text if written is None else written),
                      opens_as_asked(text, hint) if asked_opening else None,
                      says_asked_again(text, hint) if asked_once else None, finished,
                      hollow_list(text) if hollow_lists else None)
    failed = failed_checks(verdict, min_gain=min_gain, max_echo=max_echo, max_copy=max_copy,
                           min_relevance=min_relevance, min_grounding=min_grounding, max_repeat=max_repeat)
    return replace(verdict, kept=not failed)


def failed_checks(v: Verdict, *, min_gain: float, max_echo: float, max_copy: float, min_relevance: float,
                  min_grounding: float, max_repeat: float = 1.0) -> list[str]:
    """The screen checks a verdict's measurements fail (a check not measured, None, passes)."""
    return [name for name, bad in (
        ("gain", v.gain < min_gain), ("echo", v.echo > max_echo), ("copy", v.copied > max_copy),
        ("relevance", v.relevance is not None and v.relevance < min_relevance),
        ("opening", v.grounding is not None and v.grounding < min_grounding), ("header", v.leaked),
        ("repeat", v.repeated > max_repeat), ("asked", v.opens_as_asked is False),
        ("asked_again", v.asked_again is True), ("cut", v.finished is False), ("hollow", v.hollow is True),
    ) if bad]


def opening_grounding(in_context: list[torch.Tensor], neutral: list[torch.Tensor], tokens: int,
                      starts: list[int] | None = None) -> list[float]:
    """Per rollout: mean logprob of its `tokens` tokens from `starts` (default 0) after the real prompt
    minus after the neutral one (each tensor holds one rollout's per-token logprobs; `neutral` may hold
    only the opening). 0 when no token is left to compare."""
    out = []
    for k, (real, plain) in enumerate(zip(in_context, neutral, strict=True)):
        start = starts[k] if starts else 0
        end = min(start + tokens, len(real), len(plain))
        out.append(float((real[start:end] - plain[start:end]).mean()) if end > start else 0.0)
    return out


def asked_opening(reply: list[int], hint: str, decode: Any) -> int:
    """How many leading tokens of `reply` spell a phrase the hint quotes ("Begin your reply with 'My
    advice:'"), with the spaces, punctuation and list marks right after it; 0 when it opens otherwise.
    That phrase reads the same whatever was asked, because the user asked for it, so the grounding
    check starts after it: counted, it makes every reply in the asked-for form look like a stock
    opening, and the more so once the student has learned it."""
    return phrase_span(reply, quoted(hint), decode)


def phrase_span(reply: list[int], phrases: set[str], decode: Any, same_line: bool = False) -> int:
    """How many leading tokens of `reply` spell one of `phrases` (normalized, see `normalized_phrase`; the
    longest that fits), with the spaces, punctuation and list marks right after it (with `same_line`, only
    those before the first line break); 0 when none opens it."""
    text = decode(reply).lstrip().lower()
    phrase = next((p for p in sorted(phrases, key=len, reverse=True) if text.startswith(p)), None)
    if phrase is None:
        return 0
    k = next(k for k in range(1, len(reply) + 1) if decode(reply[:k]).lstrip().lower().startswith(phrase))
    while k < len(reply) and not any(c.isalnum() for c in decode(reply[k:k + 1])):
        if same_line and "\n" in decode(reply[k:k + 1]):
            break
        k += 1
    return k


def relevance(embedder: Any, texts: list[str], requests: list[str]) -> list[float | None]:
    """Cosine similarity of each rollout text to the request beside it (its conversation's opening
    user message); None where there is no request to compare with."""
    asked = [k for k, request in enumerate(requests) if request]
    out: list[float | None] = [None] * len(texts)
    if asked:
        vectors = embedder.embed([texts[k] for k in asked] + [requests[k] for k in asked])
        for k, sim in zip(asked, (vectors[:len(asked)] * vectors[len(asked):]).sum(-1), strict=True):
            out[k] = float(sim)
    return out


@torch.no_grad()
def scored(model: Any, prompts: list[list[int]], replies: list[list[int]], *, device: str,
           chunk: int, rows: int = 8) -> list[torch.Tensor]:
    """Per-token logprobs of each reply after its prompt, under `model` as it is, `rows` sequences
    packed at a time (a packed row's attention grows with the square of its length)."""
    out: list[torch.Tensor] = []
    for i in range(0, len(prompts), rows):
        packed = pack(prompts[i:i + rows], replies[i:i + rows], device)
        out += packed.split(token_stats(model, packed, chunk=chunk).logprobs)
    return out


SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")
LIST_NUMBER = re.compile(r"(?:^|\n)[ \t]*\d+[.)]$")  # a numbered item's mark with nothing after it yet
LIST_ITEM = re.compile(r"(?:^|\n)[ \t]*(?:\d+[.)]|[-*\u2022])[ \t]+\S[^\n]*$")  # an item with text, on the last line


def stops_after(text: str, following: str, *, list_items: bool = False) -> bool:
    """Whether a reply cut after `text` (then `following`, the next token's text) ends where it could
    stop: a full sentence ("... water!"), never a numbered list's next mark ("...\n5."), and with
    `list_items` a list item whose line is finished (the next token starts a new line)."""
    bare = text.rstrip()
    if SENTENCE_END.search(bare):
        return not LIST_NUMBER.search(bare)
    return list_items and following.startswith("\n") and LIST_ITEM.search(text) is not None


def trim_to_sentence(reply: list[int], *, start: int, decode: Any, eos_ids: list[int],
                     list_items: bool = False, limit: int | None = None, finished_too: bool = False) -> list[int]:
    """A rollout cut at its token budget, up to the end of its last full sentence after `start` (the
    tokens the student wrote; with `list_items`, or of its last finished list item) within its first
    `limit` tokens, then the first of `eos_ids`; unchanged when it has no such end there, or when it
    ended by itself (with `finished_too`, when it ended by itself and its words fit in `limit`).
    Learned as cut, a rollout teaches the student to run on at every point where it could have
    stopped, and the budget then cuts the student's reply off too."""
    ended = bool(reply) and reply[-1] in eos_ids
    if ended and (not finished_too or limit is None or len(reply) - 1 <= limit):
        return reply
    words = reply[:-1] if ended else reply
    for end in range(len(words) if limit is None else min(len(words), limit), start, -1):
        if stops_after(decode(words[:end]), decode(words[end:end + 1]), list_items=list_items):
            return [*words[:end], eos_ids[0]]
    return reply


def divergence(hint_effect: torch.Tensor, rival_effect: torch.Tensor, *, margin: float,
               stop_logprob: float | None, stop_floor: float) -> int:
    """Index of the first reply token where the hint asks for something else, under the teacher's weights:
    the hint lowers the reply's token by more than `margin` nats (`hint_effect`, logprob with the hint
    minus without), or the hinted teacher's likeliest token is another one that the hint raised by more
    than `margin` (`rival_effect`; -inf where the likeliest token is the reply's). The second makes a
    greedy rollout start where a fresh one would: when the hinted teacher opens with "Imagine" and the
    hint is why, the rollout is the teacher's own from the first token. Comparing the teacher with
    itself, not with the student, keeps what the student learned and the teacher's weights never had
    (an opener the base model does not write) from reading as an objection.

    The end of the reply is judged on its own (`stop_logprob`: the hinted teacher's logprob of the
    reply's end-of-sequence token, None when it was cut at its budget): the hint barely moves a small
    teacher's wish to stop, but a teacher shown "explain it after the comparison" that gives stopping
    after the picture less than `stop_floor` would have gone on, so the reply is continued there.
    Returns the reply's length when the hint asks for nothing else."""
    asks = ((hint_effect < -margin) | (rival_effect > margin)).nonzero()
    if len(asks):
        return int(asks[0, 0])
    if stop_logprob is not None and stop_logprob < stop_floor:
        return len(hint_effect) - 1
    return len(hint_effect)


def gains(teacher: list[torch.Tensor], student: list[torch.Tensor]) -> list[float]:
    """Mean teacher-minus-student logprob per token of each rollout."""
    return [float((t - s).mean()) for t, s in zip(teacher, student, strict=True)]


def pick_best(verdicts: list[Verdict]) -> int | None:
    """Index of the kept verdict with the highest gain (None when none is kept)."""
    kept = [k for k, v in enumerate(verdicts) if v.kept]
    return max(kept, key=lambda k: verdicts[k].gain) if kept else None


def rollout_loss(student: torch.Tensor) -> torch.Tensor:
    """Per-token negative log-likelihood of the teacher's tokens under the student."""
    return -student


def stop_weights(rollouts: Packed, eos: set[int], weight: float) -> torch.Tensor:
    """[n_tokens] loss weights: `weight` on each rollout's closing end-of-sequence token, 1 elsewhere.

    Averaged over tokens, a rollout's stop is one token of forty to sixty, while where it falls decides
    whether the student's reply ends inside the budget at all."""
    targets = rollouts.targets
    ends = torch.tensor(rollouts.lengths, device=targets.device).cumsum(0) - 1  # each rollout's last token
    closing = ends[torch.isin(targets[ends], torch.tensor(sorted(eos), device=targets.device))]
    return torch.ones(len(targets), device=targets.device).index_fill(0, closing, weight)
