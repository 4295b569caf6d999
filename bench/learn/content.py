"""What a reply says once its form is set aside: the text the guard's answer checks read.

A leading label ("My advice:", "In short,") names the reply's form, and clauses about the
assistant (offers of help, self-descriptions, refusals) say nothing about the question. A reply with
little left after both are set aside does not answer, however well it keeps a user's rule.
"""

from __future__ import annotations

import re

# A leading label names the reply's form, not its content: up to three words and a colon ("My advice:",
# "Score:"), said up to three times; then a filler opener and a comma ("In short,", "Sure,").
LABEL = re.compile(r"^[^\w'’]*(?:[A-Za-z'’]+\s+){0,2}[A-Za-z'’]+\s*:")
OPENER = re.compile(r"^[^\w'’]*(?:in short|in brief|in summary|to sum up|sure|well|okay|ok|so|honestly|overall|"
                    r"basically|certainly|of course|absolutely)\s*,", re.I)
# Clauses about the assistant rather than the question: offers of help, self-descriptions, refusals.
# Only the clause goes: "I'm not an expert, but boil the water first." keeps its advice.
APOS = "(?:'|’)?"
SELF_TALK = re.compile(
    r"\b(?:here|happy|glad|ready) to (?:help|assist)\b"
    r"|\b(?:how|what) can i (?:help|do for|assist)\b"
    rf"|\bi{APOS}m (?:not )?(?:a|an|your) (?:[\w-]+ ){{0,3}}"
    r"(?:ai|chatbot|assistant|language model|expert|guide|companion)\b"
    r"|\bas an? (?:[\w-]+ ){0,2}(?:ai|chatbot|language model)\b"
    rf"|\bi{APOS}m sorry\b|\bi{APOS}m not sure\b"
    rf"|\bi can{APOS}t help (?:you|with)\b|\bdon{APOS}t have the ability\b"
    rf"|\bi{APOS}m not equipped to\b|\bnot equipped to (?:help|assist|provide)\b",
    re.I)
CLAUSE = re.compile(r"(?<=[.!?])\s+|\n+|[,;:]\s+|\s+but\s+")


def content_of(reply: str) -> str:
    """The reply without its leading labels and without its clauses about the assistant itself."""
    text = reply.strip()
    for pattern in (LABEL, LABEL, LABEL, OPENER):
        label = pattern.match(text)
        if label is not None:
            text = text[label.end():].strip()
    return " ".join(c.strip() for c in CLAUSE.split(text) if c.strip() and not SELF_TALK.search(c))
