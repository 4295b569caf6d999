"""What a reply says once its form is set aside: the text the guard's answer checks read.

A leading label ("My advice:", "In short,") names the reply's form, and sentences about the
assistant (offers of help, self-descriptions, refusals) say nothing about the question. A reply with
little left after both are set aside does not answer, however well it keeps a user's rule.
"""

from __future__ import annotations

import re

# A leading label names the reply's form, not its content: up to three words and a colon ("My advice:",
# "Score:"), said up to three times, then once up to two words and a comma ("In short,", "Yes,").
LABEL = re.compile(r"^[\W_]*(?:[A-Za-z'’]+\s+){0,2}[A-Za-z'’]+\s*:")
OPENER = re.compile(r"^[\W_]*(?:[A-Za-z'’]+\s+)?[A-Za-z'’]+\s*,")
# Sentences about the assistant rather than the question: offers of help, self-descriptions, refusals.
APOS = "(?:'|’)?"
SELF_TALK = re.compile(
    r"\b(?:here|happy|glad|ready) to (?:help|assist)\b"
    r"|\b(?:how|what) can i (?:help|do for|assist)\b"
    rf"|\bi{APOS}m (?:not )?(?:a|an|your) (?:[\w-]+ ){{0,3}}"
    r"(?:ai|chatbot|assistant|language model|expert|guide|companion)\b"
    r"|\bas an? (?:[\w-]+ ){0,2}(?:ai|chatbot|language model|assistant)\b"
    rf"|\bi{APOS}m sorry\b|\bi can{APOS}t help\b|\bnot equipped to\b|\bdon{APOS}t have the ability\b",
    re.I)
SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def content_of(reply: str) -> str:
    """The reply without its leading labels and without its sentences about the assistant itself."""
    text = reply.strip()
    for pattern in (LABEL, LABEL, LABEL, OPENER):  # one comma only: "Flour, water, salt, ..." is content
        label = pattern.match(text)
        if label is not None:
            text = text[label.end():].strip()
    return " ".join(s.strip() for s in SENTENCE.split(text) if s.strip() and not SELF_TALK.search(s))
