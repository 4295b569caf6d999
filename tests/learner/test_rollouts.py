"""Which teacher rollouts are learned: echoes of the hint or of the conversation are not.

The texts are teacher rollouts and hints seen in a bottomline benchmark run (scripts/rollout_probe.py).
"""

from __future__ import annotations

import pytest

from learner.rollouts import Verdict, pick_best, screen, share_in

DEFAULTS = {"min_gain": 0.0, "max_echo": 0.8, "max_copy": 0.5}


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
