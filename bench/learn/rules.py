"""Ground-truth checks for the simulated users' hidden preferences.

Each check returns the list of violations it found (empty: the rule is met). A violation carries a
code the simulator turns into a natural-language correction. These checks are the benchmark's
ground truth; the judge never sees them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADING = re.compile(r"^\s{0,3}#{1,6}\s", re.M)
BOLD_HEADING = re.compile(r"^\s*\*\*[^*\n]{1,80}\*\*:?\s*$", re.M)
BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,2}[.)])\s+\S", re.M)
# a list item's or heading's line: a list mark (bold allowed before it, "**1. Timing:**"), a markdown
# heading's, or bold from the line's start ("**Timing:**")
ITEM_OR_HEADING = re.compile(r"^\s*(?:[*_]*(?:\d+[.)]|[-*+•]|#{1,6})\s+\S|(?:\*\*|__)\S)")
AI_OPENERS = ("certainly", "sure!", "sure,", "of course", "absolutely", "great question", "as an ai")
SCORE_LINE = re.compile(r"^Score: (10|[0-9])/10$")
# A sentence ends at . ! or ? followed by space or the end, so decimals like 3.5 do not split.
SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’-]*")
# "In short," or "In short:" as the reply's first words, then the answer itself.
BOTTOM_LINE = re.compile(r"^[\W_]*in short\s*[,:\-–—]\s*\S", re.I)
# "Sure thing" as the reply's first words, then punctuation and the answer itself.
SURE_THING = re.compile(r"^[\W_]*sure thing\s*[!,.:\-–—]\s*\S", re.I)
# "My advice:" as the reply's first words, then the advice itself.
MY_ADVICE = re.compile(r"^[\W_]*my advice\s*[,:\-–—]\s*\S", re.I)
# "Good news:" (or "Good news!") as the reply's first words, then the answer itself.
GOOD_NEWS = re.compile(r"^[\W_]*good news\s*[!,.:\-–—]\s*\S", re.I)
# "Imagine" as the reply's first word (markdown emphasis allowed), then the everyday picture itself.
IMAGINE_WORD = re.compile(r"^[\W_]*imagine\b\**", re.I)
IMAGINE = re.compile(IMAGINE_WORD.pattern + r"\s+\S", re.I)
# A sentence that only paints another picture ("Now imagine ...", "Picture ...", "Think of ...").
PICTURE = re.compile(r"^[\W_]*(?:(?:now|then|and|so|just)\s+)*(?:imagine|picture|think of|envision)\b", re.I)
# A picture that is a comparison in itself: "Imagine a credit score as a school report ...".
COMPARES = re.compile(r"\b(?:like|as (?:a|an|the|if|though)|similar to|just as)\b", re.I)
# Where a picture likens one thing to another: "Imagine a router as/like/is a post office". Broader
# than COMPARES, which decides whether the opening compares at all; this only finds where the picture is.
LIKENED = re.compile(r"\b(?:like|as|similar to|(?:is|are|were) (?:a|an|just|like))\b", re.I)
# Where the thing pictured ends: a clause break, or a word that starts saying more about it.
PICTURE_END = re.compile(r"\s*(?:[,:;]|\s[–—-]\s)|\s(?:that|which|who|where|when|with|for|of|to)\b", re.I)
# Where an answer may follow the picture inside its own sentence: "... a post office: it sorts letters."
ANSWER_CLAUSE = re.compile(r"\s*(?:[:;]|\s[–—-])\s+")
# A numbered step: "1." or "1)" at the start of a line (after optional markdown emphasis), then text.
STEP = re.compile(r"^\s*\**(\d{1,2})[.)]\**\s+\S", re.M)


@dataclass(frozen=True)
class Violation:
    """One way a reply broke a user's rule: a stable code and a short description."""

    code: str
    detail: str


def sentences(text: str) -> list[str]:
    """Split prose into sentences; a trailing fragment without a full stop counts as one."""
    parts = [p.strip() for p in SENTENCE_END.split(text.strip().replace("\n", " "))]
    return [p for p in parts if WORD.search(p)]


def words(text: str) -> list[str]:
    return WORD.findall(text)


def check_student(text: str, *, max_sentences: int = 3) -> list[Violation]:
    """Homework help that must not look AI-written: no headings, no lists, no stock opener, short."""
    found: list[Violation] = []
    if HEADING.search(text) or BOLD_HEADING.search(text):
        found.append(Violation("heading", "uses markdown headings"))
    if BULLET.search(text):
        found.append(Violation("list", "uses a bullet or numbered list"))
    if text.strip().lower().startswith(AI_OPENERS):
        found.append(Violation("opener", "opens with a stock chatbot phrase"))
    n = len(sentences(text))
    if n > max_sentences:
        found.append(Violation("too_long", f"{n} sentences, more than {max_sentences}"))
    return found


def check_teacher(text: str) -> list[Violation]:
    """A grading reply: exactly `Score: X/10` on the first line, then exactly one sentence."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines or not SCORE_LINE.match(lines[0]):
        return [Violation("score_line", "the first line is not 'Score: X/10'")]
    rest = " ".join(lines[1:])
    n = len(sentences(rest))
    if n == 0:
        return [Violation("no_reason", "no sentence after the score")]
    if n > 1:
        return [Violation("too_long", f"{n} sentences after the score, not one")]
    return []


def check_brief(text: str, *, max_words: int = 25) -> list[Violation]:
    """A busy reader: at most `max_words` words, in plain prose (no lists)."""
    found: list[Violation] = []
    n = len(words(text))
    if n > max_words:
        found.append(Violation("too_long", f"{n} words, more than {max_words}"))
    if BULLET.search(text):
        found.append(Violation("list", "uses a list"))
    return found


def _opens_with(opening: re.Pattern[str], text: str, missing: Violation) -> list[Violation]:
    """An opening-phrase rule: met when `opening` matches the start of the reply."""
    return [] if opening.match(text.strip()) else [missing]


def check_bottomline(text: str) -> list[Violation]:
    """A reader who wants the bottom line first: the reply opens with "In short," and an answer."""
    return _opens_with(BOTTOM_LINE, text, Violation("bottom_line", "does not open with 'In short,' and the answer"))


def check_casual(text: str) -> list[Violation]:
    """A user who wants a friendly, casual register: the reply opens with "Sure thing!" and an answer."""
    return _opens_with(SURE_THING, text, Violation("sure_thing", "does not open with 'Sure thing!' and the answer"))


def check_advice(text: str) -> list[Violation]:
    """A user who wants a recommendation, named as one: the reply opens with "My advice:" and the advice.
    A list of headings after the label ("My advice:\n\n* Use a good recipe:\n* Choose a good pot:")
    names topics and advises nothing; a run whose simulator thanked such replies learned to write
    them (7 of its 10 satisfied held-out replies at the last version)."""
    text = text.strip()
    opened = MY_ADVICE.match(text)
    if opened is None:
        return [Violation("advice", "does not open with 'My advice:' and the advice")]
    if headings_only(text[opened.end() - 1:]):
        return [Violation("advice_headings", "lists headings with nothing under them, no advice")]
    return []


def headings_only(body: str) -> bool:
    """Whether `body` is headings with nothing under them: it has a list item or heading (`ITEM_OR_HEADING`),
    and every line ends with a colon, bold and italic marks aside. A lead-in ("focus on these:") is
    no advice either. A line that says something, before, under or after the headings ("* Use a good
    recipe: one that weighs the flour", "Pick it when it smells sweet.", "* Pack light"), makes it
    not so, however little it says."""
    lines = [line for line in body.splitlines() if line.strip(" \t*_")]
    return (any(ITEM_OR_HEADING.match(line) for line in lines)
            and all(line.rstrip(" \t*_").endswith((":", "：")) for line in lines))


def check_reassure(text: str) -> list[Violation]:
    """A worried user who wants reassurance first: the reply opens with "Good news:" and the answer.
    Whether what follows is good news is not checked ("Good news: your keyboard is ruined" passes)."""
    return _opens_with(GOOD_NEWS, text, Violation("good_news", "does not open with 'Good news:' and the answer"))


def check_analogy(text: str, *, topic: tuple[str, ...], min_words: int = 12) -> list[Violation]:
    """A learner who needs an everyday picture first: the reply opens with "Imagine", a comparison, and
    then the answer. A picture alone ("Imagine a router.") answers nothing: fewer than `min_words` words
    cannot hold both, and a run whose simulator thanked such replies learned to write only them. Nor
    does a chain of pictures ("Imagine a world where X. Now imagine a world where Y."), which a later
    run learned once twelve words were enough. The opening sentence must itself compare ("Imagine a
    credit score as a school report ...") or be followed by an answer: a sentence, or a clause after
    a colon, semicolon or dash, that is not one more picture.

    Nor is the thing asked about a picture of itself ("Imagine a smoke detector. It's designed to
    ..."), which a run learned once the rules above were met: the picture (what follows "as" or
    "like" when the opening likens, else what follows "Imagine") must not name any of `topic`,
    the question's subject in a few words. Whether the picture is everyday is not checked: "Imagine
    a hard drive as a powerful machine" passes."""
    missing = _opens_with(IMAGINE, text, Violation("analogy", "does not open with an everyday picture ('Imagine ...')"))
    if missing:
        return missing
    n = len(words(text))
    if n < min_words:
        return [Violation("picture_only", f"{n} words: a picture with no answer after it")]
    parts = sentences(text)
    after = [*ANSWER_CLAUSE.split(parts[0])[1:], *parts[1:]]
    answered = any(WORD.search(p) and not PICTURE.match(p.strip()) for p in after)
    if not (answered or COMPARES.search(parts[0])):
        return [Violation("picture_only", "only pictures, no answer after them")]
    picture = pictured(parts[0])
    named = [t for t in topic if names(picture, t)]
    if named:
        return [Violation("self_picture", f"pictures {named[0]!r}, the thing asked about, not an everyday thing")]
    return []


def pictured(opening: str) -> str:
    """What an "Imagine ..." sentence pictures: after the word that likens it to something if there is
    one, up to the first clause break or a word that says more about it ("that", "with", "for", ...)."""
    body = IMAGINE_WORD.sub("", opening.strip(), count=1)
    likened = LIKENED.search(body)
    if likened:
        body = body[likened.end():]
    return PICTURE_END.split(body, maxsplit=1)[0]


def names(text: str, term: str) -> bool:
    """Whether `text` names `term` as whole words, in the singular or plural."""
    return re.search(rf"\b{re.escape(term)}(?:s|es)?\b", text, re.I) is not None


def check_steps(text: str, *, min_steps: int = 2) -> list[Violation]:
    """Procedures as numbered steps: lines numbered 1, 2, ... in order, at least `min_steps` of them."""
    numbers = [int(n) for n in STEP.findall(text)]
    run = 0
    for n in numbers:
        if n == run + 1:
            run = n
    if run < min_steps:
        return [Violation("steps", f"{run} numbered steps in order, fewer than {min_steps}")]
    return []
