"""What a user's correction says to do, for a hint taken from the correction.

A correction usually pairs a complaint ("You buried the answer.") with an instruction ("Start with
'In short,' and then the answer."). A hint is meant to be the instruction (OpenClaw-RL's judge is
asked for what the reply should have done); the complaint is what the hinted teacher then answers
instead: on the user's complaint "I only read the first line and it told me nothing." SmolLM2-135M
writes "I'm sorry for your loss…". `instructions` drops the complaint before the first instruction
and keeps the rest as written. It reads English imperatives by the first word of each clause, after
softeners like "please" or "just": a verb from `VERBS`, a negation ("Don't…", "No bullet points…"), "you
should/need to/must…" or "I want/need…". A short instruction that points back ("Leave it out.")
keeps the sentence before it, which names what "it" is; so does one of any length whose object is
"them", "these", "those" or "each one" ("Put each one on its own line."): a plural points at things
the sentence before named. A correction with no instruction sentence is kept whole.

An imperative that only asks for an answer to what was asked ("Answer my question.", "Stay on
topic.", "Respond to what I asked.") says the reply was off the point and nothing about what the
right one holds, so it reads as a complaint, not an instruction; one with a pronoun ("Focus on
that.") or a colon ("Stick to what I asked: the total.") still points at what it wants. Only the
imperative form is read so: "You need to answer my question." and "Don't change the subject." still
count as instructions. The small teacher answers such a demand as it answers bare complaints: in
the learning benchmark's six runs with opd_complaints off, the 33 rollouts written for a user's "…,
answer the actual question." said the hint back (12), opened "You're a helpful AI, I'm here to help
with any question…" (8), apologised "as a chatbot", or talked about the question; the screen kept
one. Read as an instruction, such a turn was still distilled token by token, and one run's last
version answered "I'm a helpful AI, and I'm here to help you with your baking journey."
(docs/BENCHMARKS.md).
"""

from __future__ import annotations

import re

from judges.reaction import sentences, without_sentences

# Verbs a person starts an instruction about a reply with. Not "try" (a retry request, handled by
# judges/retry.py) or "let" ("Let me think."), which open too many other sentences.
VERBS = frozenset((
    "add", "answer", "ask", "avoid", "begin", "break", "call", "change", "check", "cite", "convert", "cut",
    "delete", "describe", "drop", "end", "explain", "finish", "fix", "focus", "follow", "format", "give", "go",
    "include", "keep", "lay", "lead", "leave", "limit", "list", "lose", "make", "mention", "move", "name", "number",
    "open", "place", "put", "quote", "remove", "rename", "rephrase", "replace", "reply", "respond", "rewrite",
    "say", "separate", "shorten", "show", "simplify", "skip", "split", "start", "state", "stay", "stick",
    "stop", "summarise", "summarize", "swap", "switch", "tell", "trim", "turn", "use", "wrap", "write",
))
SOFTENERS = frozenset((
    "please", "just", "and", "so", "now", "then", "ok", "okay", "also", "instead", "next", "time", "but", "rather",
))
NEGATIONS = ("don't ", "dont ", "do not ", "never ", "no ", "always ")  # "stop", "make sure": VERBS
_MODAL = re.compile(r"^(you (should|must|need to|have to|'ll have to|will have to|ought to)"
                    r"|i (need|want|'d like|would like|prefer)) ", re.I)
_POINTS_BACK = re.compile(r"\b(it|that|this|them|those|these)\b", re.I)
# The object right after the verb is a plural pronoun: "Put each one ...", "Write them ...".
_PLURAL_OBJECT = re.compile(r"^\W*(?:(?:please|just|now|then|so|and)\s+)*[a-z']+\s+"
                            r"(them|these|those|each one|each of them|all of them)\b", re.I)
_WORD = re.compile(r"[a-z']+")
_CLAUSES = re.compile(r"\s*[,;:–—]\s+|\s+-\s+")  # commas, semicolons, colons and dashes between clauses
SHORT_WORDS = 4  # "Leave it out." or "Cut that bit." points back; "Keep it under 25 words." does not
# A demand for an answer to what was asked, and no more: a verb of answering or staying on the question,
# then only words that name the question or soften the demand. "Answer in French." says more, and so do
# pronouns ("Focus on that." points at something the sentence before named) and plurals ("Answer my
# questions." after "I asked about two things.").
RELEVANCE_VERBS = frozenset(("answer", "respond", "reply", "focus", "stick", "stay"))
RELEVANCE_WORDS = frozenset((
    "to", "on", "back", "the", "my", "what", "i", "i'm", "asked", "asking", "said", "actual", "actually",
    "real", "original", "question", "topic", "subject", "point", "track", "focused", "instead",
    "please", "just", "now", "already", "directly", "properly",
))


def is_instruction(sentence: str) -> bool:
    """Whether a sentence tells the assistant what to do, in any of its clauses: a complaint often
    comes first in the same sentence ("Too long, I need it shorter.", "I'm busy, so keep it short.")."""
    # "Stick to what I asked: the total." names what the answer holds after the colon.
    answer_only_counts = not re.search(r":\s*\S", sentence)
    return any(_instructs(clause, answer_only_counts) for clause in _CLAUSES.split(sentence))


def _instructs(clause: str, answer_only_counts: bool) -> bool:
    text = clause.strip().lower().replace("’", "'")
    if _MODAL.match(text) or any(text.startswith(n) for n in NEGATIONS):
        return True
    words = _WORD.findall(text)
    while words and words[0] in SOFTENERS:
        words = words[1:]
    if words[:2] == ["do", "not"] or words[:1] == ["don't"]:
        return True
    return bool(words) and words[0] in VERBS and not (answer_only_counts and asks_only_for_an_answer(words))


def asks_only_for_an_answer(words: list[str]) -> bool:
    """An imperative clause (its words, softeners off) that asks only that the question be answered."""
    return words[0] in RELEVANCE_VERBS and all(w in RELEVANCE_WORDS for w in words[1:])


def has_instruction(text: str) -> bool:
    """Whether any sentence of the text tells the assistant what to do."""
    return any(is_instruction(p) for p in sentences(text))


def points_back(sentence: str) -> bool:
    """An instruction whose object is a pronoun, so it needs the sentence before it: a short one with
    any pronoun ("Use this instead:" points at what follows), or one whose verb takes a plural."""
    if _PLURAL_OBJECT.match(sentence):
        return True
    short = len(sentence.split()) <= SHORT_WORDS and not sentence.rstrip().endswith(":")
    return short and bool(_POINTS_BACK.search(sentence))


def instructions(text: str) -> str:
    """The text from its first instruction sentence on (from the sentence before, if that one points
    back), as written: what follows an instruction (details, an example, code) belongs to it. The
    whole text when it has no instruction."""
    parts = sentences(text)
    first = next((i for i, p in enumerate(parts) if is_instruction(p)), None)
    if first is None:
        return text.strip()
    if first > 0 and points_back(parts[first]):
        first -= 1
    return without_sentences(text, parts, [i < first for i in range(len(parts))])
