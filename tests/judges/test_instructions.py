"""Instruction sentences kept from a correction hint (judges/instructions.py).

The tables were written apart from the benchmark's simulated users (bench/learn/users.py), whose
corrections are what the change was measured on (scripts/screen_hints.py); the first test checks
that none of them appears here.
"""

from __future__ import annotations

import pytest

from bench.learn import users
from judges.instructions import has_instruction, instructions, is_instruction
from judges.reaction import sentences, without_sentences

INSTRUCTIONS = [
    "Give me the total in euros.", "Please answer in French.", "Just say yes or no.",
    "Use metric units.", "Put the date first.", "Don't apologise.", "Do not repeat the question.",
    "No emojis, please.", "Never guess a file name.", "You should read the error message first.",
    "You need to quote the line number.", "I want the code without comments.", "Keep it to one line.",
    "Then explain the second step.", "Stop adding a summary at the end.", "Write the test before the fix.",
    "Next time lead with the price.", "Always include the units.", "Make sure the JSON is valid.",
    "Cut it.", "Wrong units, give me Celsius.", "I'm on my phone, so make it short.",
    "Too wordy; I need the one-line version.", "That's the old API – use the new client.",
    "Lay the figures out in a table.",
]
COMPLAINTS = [
    "Way off, I can't use this in the report.", "That is wrong.", "This is not what I asked for.",
    "Why is everything in capitals?", "The function still crashes on empty input.", "Nope.",
    "No, wrong.", "You missed the point.", "I asked about Tuesday.", "Too formal.",
    "It reads like a press release.", "Where did the numbers come from?", "Hmm, not quite.",
    "Thanks, but that's not it.", "The tool returned an error.", "Well, that didn't work.",
    "Sorry, I still see the same error; nothing changed.", "If anything, it got worse - much worse.",
]

# Asking only for an answer to what was asked names nothing the right reply holds (see the module).
ANSWER_ONLY = [
    "Answer my question.", "Please just answer the question I asked.", "Stay on topic.",
    "Respond to what I asked.", "Focus on my question instead.", "Stick to the original question.",
    "That's beside the point, just answer what I asked.", "Answer my actual question please.",
    "Reply to what I said.", "Stay on point.", "Answer the question, please.",
]
# The same verbs with something the reply must hold stay instructions.
ANSWER_WITH_CONTENT = [
    "Answer in French.", "Answer the question in one line.", "Reply with the total only.",
    "Respond as a list.", "Focus on the error message.", "Stick to metric units.", "Reply in the tone of my email.",
    "Stick to what I asked: the total.",  # what the answer holds follows the colon
]


def test_the_tables_are_not_the_simulators_phrasings() -> None:
    simulated = {c for group in users.CORRECTIONS.values() for c in group}
    simulated |= {*users.BOTTOM_LINE, *users.TOOL_FAILED, *users.TOOL_MISSING, *users.BRIEF_TOO_LONG,
                  *users.TEACHER_TOO_LONG, *users.STEPS, *users.STEPS_TOO_LONG}
    written = INSTRUCTIONS + COMPLAINTS + ANSWER_ONLY + ANSWER_WITH_CONTENT
    assert not any(s in c for s in written for c in simulated)


@pytest.mark.parametrize("sentence", INSTRUCTIONS)
def test_instructions_are_read_as_such(sentence: str) -> None:
    assert is_instruction(sentence)


@pytest.mark.parametrize("sentence", COMPLAINTS)
def test_complaints_are_not_instructions(sentence: str) -> None:
    assert not is_instruction(sentence)


@pytest.mark.parametrize(("correction", "kept"), [
    # the complaint goes, the instruction stays
    ("Way off, I can't use this in the report. Give me the total in euros.", "Give me the total in euros."),
    ("Why is everything in capitals? Write it in normal case.", "Write it in normal case."),
    ("That is wrong. Use metric units. Don't round the result.", "Use metric units. Don't round the result."),
    # a short instruction that points back keeps what it points at
    ("The signature at the bottom looks odd. Remove it.", "The signature at the bottom looks odd. Remove it."),
    ("Too many exclamation marks in that one. Please cut them.",
     "Too many exclamation marks in that one. Please cut them."),
    # ... and so does a longer one whose object is a plural pronoun: it names nothing by itself
    ("You left the imports unsorted. Sort them alphabetically, standard library first.",
     "You left the imports unsorted. Sort them alphabetically, standard library first."),
    ("The headers are missing units. Please give each one its unit in brackets.",
     "The headers are missing units. Please give each one its unit in brackets."),
    ("Those links are dead. Replace these with archived copies from the wayback machine.",
     "Those links are dead. Replace these with archived copies from the wayback machine."),
    # a longer one about "it" (most often the reply itself) stands alone
    ("Way off. Keep it under fifty words and plain.", "Keep it under fifty words and plain."),
    # nothing to keep apart: the correction stays whole
    ("That is wrong, the function still crashes on empty input.",
     "That is wrong, the function still crashes on empty input."),
    ("Too formal. It reads like a press release.", "Too formal. It reads like a press release."),
    ("", ""),
    # what follows the first instruction stays, as written: details, code, a later complaint
    ("No, that crashes.\nUse this instead:\n```python\ndef f(x):\n    return x or 0\n```\nThanks.",
     "Use this instead:\n```python\ndef f(x):\n    return x or 0\n```\nThanks."),
    ("Use metric units. That is wrong.", "Use metric units. That is wrong."),
])
def test_a_correction_keeps_its_instructions(correction: str, kept: str) -> None:
    assert instructions(correction) == kept


def test_a_dropped_sentence_goes_where_it_stands_not_where_its_words_first_occur() -> None:
    text = "Do not say Try again.\nTry again.\nThen stop."
    parts = sentences(text)
    assert without_sentences(text, parts, [p == "Try again." for p in parts]) == "Do not say Try again.\nThen stop."
    assert without_sentences(text, parts, [True, False, False]) == "Try again.\nThen stop."


@pytest.mark.parametrize("sentence", ANSWER_ONLY)
def test_asking_only_for_an_answer_is_a_complaint(sentence: str) -> None:
    assert not is_instruction(sentence)
    assert instructions(f"Way off. {sentence}") == f"Way off. {sentence}"  # no instruction: kept whole


@pytest.mark.parametrize("sentence", ANSWER_WITH_CONTENT)
def test_answering_verbs_with_content_are_instructions(sentence: str) -> None:
    assert is_instruction(sentence)
    assert instructions(f"Way off. {sentence}") == sentence


def test_a_demand_to_answer_that_points_back_keeps_what_it_points_at() -> None:
    assert instructions("You skipped the error on line 3. Focus on that.") == (
        "You skipped the error on line 3. Focus on that.")
    assert has_instruction("The total in euros is what I need. Answer that.")


def test_a_bare_complaint_has_no_instruction() -> None:
    assert has_instruction("Way off, I can't use this in the report. Give me the total in euros.")
    assert has_instruction("The signature at the bottom looks odd. Remove it.")
    assert not has_instruction("Too formal. It reads like a press release.")
    assert not has_instruction("That is wrong, the function still crashes on empty input.")
    assert not has_instruction("")
