"""Simulated users: hidden preferences, prompt pools and the natural-language replies they give.

Only the simulator sees a user's rule. After each reply the user answers the way a person would:
thanks when satisfied, a correction that names what was wrong when not, never a score. The
phrasings here were written for this benchmark alone, apart from the judge's classifier data.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from bench.learn import rules
from bench.learn.rules import Violation

DATA = Path(__file__).resolve().parent / "data"

THANKS = (
    "Thanks, that's exactly what I needed.",
    "Perfect, thank you!",
    "Great, that works for me.",
    "Nice one, cheers.",
    "That's just right, thanks a lot.",
    "Lovely, appreciated.",
    "Brilliant, that's what I was after.",
    "Good stuff, thank you.",
    "Exactly like that, thanks!",
    "Spot on. Thank you.",
    "Awesome, thanks so much.",
    "That's helpful, thanks.",
)
NEXT_QUESTION = ("Next one: ", "Another question: ", "Okay, now this: ", "Now: ", "One more: ")
REDO = ("Try again.", "Can you redo it?", "Please rewrite it.", "Give it another go.", "Again, please.")

CORRECTIONS: dict[str, tuple[str, ...]] = {
    "heading": (
        "Please drop the headings, it reads like a chatbot wrote it.",
        "No section titles, I need it to look like my own writing.",
        "Why are there headers in there? Just write normal text.",
    ),
    "list": (
        "No bullet points please, write it as ordinary sentences.",
        "Don't give me a list, I need flowing prose.",
        "Lose the numbered points, it has to read like a paragraph.",
    ),
    "opener": (
        "Don't start with 'Certainly' or anything like that, nobody talks like that.",
        "Skip the cheerful opener, just answer.",
        "That opening line gives away that an AI wrote it. Leave it out.",
    ),
    "too_long": (
        "Way too long. Keep it much shorter.",
        "That's far more than I asked for, cut it down.",
        "Too wordy, I only need a couple of sentences.",
    ),
    "score_line": (
        "The first line has to be the score, written like 'Score: 6/10'.",
        "Where's the mark? Put 'Score: X/10' on the first line.",
        "You need to open with the score in the form 'Score: 7/10'.",
    ),
    "no_reason": (
        "Add one sentence after the score saying why.",
        "The score alone isn't enough, give me one sentence of feedback under it.",
    ),
    "irrelevant": (
        "That doesn't answer my question at all.",
        "This has nothing to do with what I asked.",
        "You went off topic, answer the actual question.",
    ),
    # on topic, perhaps in the right form, but nothing an answer would say
    "unanswered": (
        "That doesn't actually tell me anything. Give me a real answer, something concrete.",
        "You haven't answered the question. Tell me plainly what the answer is.",
        "That's just a general remark. What's the actual answer?",
    ),
}
TEACHER_TOO_LONG = (
    "Just one sentence after the score line, not a whole paragraph.",
    "Too much feedback, one sentence under the score is all I want.",
    "Keep the comment to a single sentence after the score.",
)
BRIEF_TOO_LONG = (
    "Too long, I need it in twenty-five words or fewer.",
    "I'm in a hurry, give me a much shorter answer, a sentence or two.",
    "Cut it down, I don't have time to read all that.",
)
BOTTOM_LINE = (
    "You buried the answer. Start with 'In short,' and then the answer.",
    "I only read the first line and it told me nothing. Open with 'In short,' and what to do.",
    "That's not the bottom line first. Begin with 'In short,', then the detail if you must.",
    "Where's the bottom line? Begin the reply with 'In short,' next time.",
)
# On topic, perhaps in the form, but no answer: the user asks for the answer and restates the form.
BOTTOM_LINE_UNANSWERED = (
    "That's a remark, not a bottom line. Begin with 'In short,' and then give me the actual answer.",
    "You still haven't answered. Open with 'In short,' followed by your answer in one plain sentence.",
    "I can't act on that. Start with 'In short,' and then tell me plainly what to do.",
)
SURE_THING = (
    "That sounds so stiff. Open with 'Sure thing!' and then answer, like a friend would.",
    "Lighten up a little. Start your reply with 'Sure thing!' next time.",
    "You sound like an instruction manual. Begin with 'Sure thing!' and then the answer.",
    "Too formal for me. Say 'Sure thing!' first, then tell me.",
)
ANALOGY = (
    "That's too abstract, I can't picture it. Start with 'Imagine' and compare it to something everyday.",
    "I can't see it in my head. Begin your reply with 'Imagine' and an everyday comparison.",
    "You didn't compare it to anything I know. Begin your reply with 'Imagine' and an everyday example.",
    "That was all theory and no picture. Begin the answer with 'Imagine' and an everyday comparison.",
)
ANALOGY_NO_ANSWER = (
    "That's only the picture, you never answered. Explain how it works after the comparison.",
    "Nice image, but it stops there. Go on and answer the question after it.",
    "You set up a comparison and left it. Finish the picture and then explain.",
)
ANALOGY_UNANSWERED = (
    "That doesn't explain anything. Begin with 'Imagine' and an everyday comparison, then say how it works.",
    "I still don't know how it works. Start with 'Imagine', compare it to something familiar, then explain.",
    "That's just a remark about it. Open with 'Imagine' and a picture, then give me the actual answer.",
)
ANALOGY_ITSELF = (
    "You pictured the very thing I asked about. Compare it to something from ordinary life instead.",
    "That's not a comparison, that's the same thing again. Begin with 'Imagine' and something familiar.",
    "I know what it is called, I need it likened to something I use every day. Start with 'Imagine' that.",
)
STEPS = (
    "That's one long block of text and I can't follow it. Lay it out as numbered steps, 1, 2, 3.",
    "You didn't number the steps. Put each one on its own line: 1., 2., 3.",
    "This is a paragraph, not a list of steps. Give me numbered steps next time.",
    "Where are the steps? I asked for them numbered, one per line.",
)
STEPS_TOO_LONG = (
    "The list ran on and got cut off. Three or four short steps are plenty.",
    "Too long, it got cut off halfway. Keep each step to a few words.",
    "I lost you before the end. Fewer, shorter steps please.",
)
ADVICE_UNANSWERED = (
    "That's a remark, not advice. Begin with 'My advice:' and then tell me what to actually do.",
    "You didn't recommend anything. Start with 'My advice:' and name one concrete thing to do.",
    "I still don't know what to do. Open with 'My advice:' followed by a specific suggestion.",
)
ADVICE = (
    "You never actually told me what to do. Begin your reply with 'My advice:' and then the advice.",
    "I asked what you'd recommend. Begin your reply with 'My advice:' and say it plainly.",
    "That's background, not a recommendation. Begin your reply with 'My advice:' and then what to do.",
    "That reads like a brochure. Begin your reply with 'My advice:' and keep it to the point.",
)
ADVICE_HEADINGS = (
    "Those are just headings with nothing under them. Begin your reply with 'My advice:' and then say what to do.",
    "You named topics but gave no actual advice. Begin your reply with 'My advice:' and tell me what to do.",
)
REASSURE = (
    "That made me more nervous, not less. Begin your reply with 'Good news:' and then what to do.",
    "You sound like a warning label. Begin your reply with 'Good news:' and then the fix.",
    "That's scary to read. Begin your reply with 'Good news:' and then tell me what to do.",
    "I'm already worried and that didn't help. Begin your reply with 'Good news:' and then the answer.",
)
TOOL_FAILED = (
    "The weather lookup failed. Write the date like 2027-03-14, and units are celsius or fahrenheit.",
    "That didn't work, the tool rejected the call. Use a YYYY-MM-DD date.",
    "The lookup errored out, fix the arguments and try again.",
)
TOOL_MISSING = (
    "You didn't look it up, please use the weather tool.",
    "Don't guess, call the weather tool for that day.",
)


@dataclass(frozen=True)
class Prompt:
    text: str
    expected: dict[str, str] | None = None  # the correct tool arguments, for the tool scenario
    topic: tuple[str, ...] = ()  # what the question asks about, in a few words (the analogy user)


@dataclass(frozen=True)
class User:
    """A simulated user: a hidden rule, prompt pools, and the hint a teacher would be given."""

    name: str
    description: str
    hint: str  # the preference in words, for the hinted-teacher ceiling
    check: Callable[[str, str], list[Violation]] | None  # (question, reply); None: a tool-use user
    train: tuple[Prompt, ...]
    heldout: tuple[Prompt, ...]
    tools: list[dict[str, Any]] | None = None
    corrections: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def correction(self, code: str, rng: random.Random) -> str:
        """Name what was wrong (a violation code, "irrelevant" or "unanswered"), in one of several phrasings."""
        options = self.corrections.get(code) or CORRECTIONS.get(code) or CORRECTIONS["irrelevant"]
        return rng.choice(options)


def correction_groups() -> dict[str, tuple[str, ...]]:
    """Every correction a simulated user can give: the shared ones by violation code, a user's own
    as "user/code" (the judge's classifier data must share none of them, see tests/bench)."""
    groups = dict(CORRECTIONS)
    for u in all_users().values():
        groups.update({f"{u.name}/{code}": phrasings for code, phrasings in u.corrections.items()})
    return groups


def control_for(order: list[str] | tuple[str, ...], user: str) -> str | None:
    """The control for `user`'s specific gain: the next trained-on user in `order`, round the end."""
    users = list(order)
    return users[(users.index(user) + 1) % len(users)] if len(users) > 1 and user in users else None


def reply_only(check: Callable[[str], list[Violation]]) -> Callable[[str, str], list[Violation]]:
    """A rule that reads the reply alone, as a (question, reply) check."""
    return lambda _question, reply: check(reply)


def thanks(rng: random.Random) -> str:
    return rng.choice(THANKS)


def follow_up(reaction: str, next_prompt: str | None, rng: random.Random, *, satisfied: bool) -> str:
    """The user's next message: the reaction, then a new question (satisfied) or a redo request."""
    if next_prompt is None:
        return reaction
    if satisfied:
        return f"{reaction} {rng.choice(NEXT_QUESTION)}{next_prompt}"
    return f"{reaction} {rng.choice(REDO)}"


def load_pool(name: str) -> tuple[tuple[Prompt, ...], tuple[Prompt, ...]]:
    """The (train, heldout) prompt pools of a user; held-out prompts are never used in training."""
    train: list[Prompt] = []
    heldout: list[Prompt] = []
    for line in (DATA / f"{name}.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            prompt = Prompt(row["prompt"], row.get("expected"), tuple(row.get("topic", ())))
            (train if row["split"] == "train" else heldout).append(prompt)
    return tuple(train), tuple(heldout)


@cache
def all_users() -> dict[str, User]:
    """The benchmark's users by name: nine text preferences and one tool-use agent."""
    from bench.learn.tools import WEATHER_TOOL

    def user(name: str, description: str, hint: str, check: Callable[[str], list[Violation]] | None,
             **extra: Any) -> User:
        train, heldout = load_pool(name)
        return User(name, description, hint, check and reply_only(check), train, heldout, **extra)

    def analogy(name: str, description: str, hint: str, **extra: Any) -> User:
        train, heldout = load_pool(name)
        topics = {p.text: p.topic for p in (*train, *heldout)}

        def check(question: str, reply: str) -> list[Violation]:
            return rules.check_analogy(reply, topic=topics[question])

        return User(name, description, hint, check, train, heldout, **extra)

    return {
        "student": user(
            "student", "homework answers that don't look AI-written: no headings or lists, no stock "
            "opener, at most 3 sentences",
            "Answer in at most three plain sentences, with no headings, no bullet points and no "
            "opener like 'Certainly'.", rules.check_student),
        "teacher": user(
            "teacher", "grading replies as 'Score: X/10' on the first line, then exactly one sentence",
            "Reply with 'Score: X/10' on the first line, then exactly one sentence explaining the mark.",
            rules.check_teacher, corrections={"too_long": TEACHER_TOO_LONG}),
        "brief": user(
            "brief", "a busy reader: at most 25 words, plain prose",
            "Answer in at most 25 words of plain prose, no lists.", rules.check_brief,
            corrections={"too_long": BRIEF_TOO_LONG}),
        "bottomline": user(
            "bottomline", "a manager who wants the bottom line first: the reply opens with 'In short,'",
            "Begin your reply with 'In short,' followed by the answer.", rules.check_bottomline,
            corrections={"bottom_line": BOTTOM_LINE, "unanswered": BOTTOM_LINE_UNANSWERED}),
        "casual": user(
            "casual", "a casual user who wants a friendly register: the reply opens with 'Sure thing!'",
            "Begin your reply with 'Sure thing!' followed by the answer.", rules.check_casual,
            corrections={"sure_thing": SURE_THING}),
        "analogy": analogy(
            "analogy", "a learner who needs an everyday picture first: the reply opens with 'Imagine'",
            "Begin your reply with 'Imagine' and an everyday comparison, then the answer.",
            corrections={"analogy": ANALOGY, "picture_only": ANALOGY_NO_ANSWER, "self_picture": ANALOGY_ITSELF,
                         "unanswered": ANALOGY_UNANSWERED}),
        "advice": user(
            "advice", "someone asking for a recommendation who wants it named as one: the reply opens "
            "with 'My advice:'",
            "Begin your reply with 'My advice:' and then the advice.", rules.check_advice,
            corrections={"advice": ADVICE, "advice_headings": ADVICE_HEADINGS, "unanswered": ADVICE_UNANSWERED}),
        "reassure": user(
            "reassure", "a worried user who wants reassurance first: the reply opens with 'Good news:'",
            "Begin your reply with 'Good news:' and then what to do.", rules.check_reassure,
            corrections={"good_news": REASSURE}),
        "steps": user(
            "steps", "a new hire who wants how-to answers as numbered steps, one per line",
            "Answer as a numbered list of steps: 1., 2., 3., one step per line.", rules.check_steps,
            corrections={"steps": STEPS, "too_long": STEPS_TOO_LONG}),
        "weather": user(
            "weather", "an agent task: call get_weather with an ISO date and a units enum value",
            "Call get_weather with the date written as YYYY-MM-DD and units set to celsius or fahrenheit.",
            None, tools=[WEATHER_TOOL], corrections={"tool_error": TOOL_FAILED, "no_call": TOOL_MISSING}),
    }
