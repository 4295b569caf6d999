"""Standing instructions read from a real SQLite DB, and how they reach the teacher's context."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from core.models import TurnStatus
from core.settings import Settings
from learner.config import TrainConfig
from learner.rollouts import asked_openings, quoted
from learner.samples import Sample, add_standing, collect_samples, teacher_prompt_ids
from learner.standing import missing_from, recurring, recurring_openings, same
from tests.learner.factories import TurnMaker

ADVICE = (
    "Begin your reply with 'My advice:' and then the advice.",
    "Begin your reply with 'My advice:' and say it plainly.",
    "Start with \"My advice:\" next time.",
)


def test_quoted_phrases_are_found_and_apostrophes_are_not_quotes() -> None:
    assert quoted("Begin with 'In short,', then the detail if you must.") == {"in short"}
    assert quoted("Start with “My advice:” and keep it short.") == {"my advice"}
    assert quoted("That doesn't answer what I'd asked, it's off topic.") == set()


@pytest.mark.parametrize(("a", "b", "alike"), [
    (ADVICE[0], ADVICE[2], True),  # the same quoted phrase
    ("Keep it much shorter, two sentences at most.", "Keep it much shorter please.", True),  # shared trigrams
    (ADVICE[0], "Begin your reply with 'Good news:' and then the advice.", False),
    ("Explain how it works after the comparison.", ADVICE[1], False),
])
def test_instructions_that_ask_for_the_same_thing_are_one(a: str, b: str, alike: bool) -> None:
    assert same(a, b) is alike


def test_an_instruction_given_in_enough_sessions_stands_in_its_commonest_phrasing(
    db: Session, maker: TurnMaker
) -> None:
    for text in (ADVICE[0], ADVICE[1], ADVICE[1], ADVICE[2]):  # four sessions, three phrasings
        maker.add(db, "How do I start running?", "Running is a sport.", score=-1, hint=text,
                  hint_source="instruction", status=TurnStatus.trained)
    for _ in range(2):  # two sessions only
        maker.add(db, "Why is the sky blue?", "It is.", score=-1, hint="Keep it under two sentences.",
                  hint_source="instruction")
    for source in ("correction", "judge"):  # not what a user said to do
        for _ in range(3):
            maker.add(db, "Hi", "Hello.", score=-1, hint="Use French.", hint_source=source)
    assert recurring(db, most=3, min_sessions=3, window=200) == [ADVICE[1]]
    assert recurring(db, most=3, min_sessions=2, window=200) == [ADVICE[1], "Keep it under two sentences."]
    assert recurring(db, most=1, min_sessions=2, window=200) == [ADVICE[1]]
    assert recurring(db, most=3, min_sessions=3, window=2) == []  # the latest two hold only the short ones
    assert recurring(db, most=0, min_sessions=1, window=200) == []
    assert recurring_openings(db, min_sessions=3, window=200) == asked_openings(ADVICE[0]) == {"my advice"}
    assert recurring_openings(db, min_sessions=5, window=200) == set()


def test_the_teacher_sees_standing_instructions_its_hint_does_not_say(
    settings: Settings, db: Session, maker: TurnMaker
) -> None:
    for text in ADVICE:
        maker.add(db, "How do I start running?", "Running is a sport.", score=-1, hint=text,
                  hint_source="instruction", status=TurnStatus.trained)
    complaint = maker.add(db, "How do I fix a flat tyre?", "Tyres are round.", score=-1,
                          hint="That doesn't answer my question at all.", hint_source="correction")
    said = maker.add(db, "What should I cook tonight?", "Food is good.", score=-1, hint=ADVICE[2],
                     hint_source="instruction")
    unhinted = maker.add(db, "Thanks!", "You're welcome.", score=1)

    def batch(config: TrainConfig) -> dict[int, Sample]:
        samples = collect_samples(db, settings, config).samples
        add_standing(db, config, samples)
        return {s.turn_id: s for s in samples}

    plain = batch(TrainConfig(batch_size=10))
    assert all(s.standing == () for s in plain.values())  # off by default

    got = batch(TrainConfig(batch_size=10, standing_instructions=2))
    # ADVICE[2] is the phrasing given in the most sessions: once before, once on the batch's own turn
    assert got[complaint.id].standing == (ADVICE[2],)
    assert got[complaint.id].teacher_hint == f"{ADVICE[2]}\nThat doesn't answer my question at all."
    assert got[said.id].standing == () and got[said.id].teacher_hint == ADVICE[2]
    assert got[unhinted.id].standing == ()
    text = maker.tokenizer.decode(teacher_prompt_ids(maker.tokenizer, got[complaint.id]))
    assert text.endswith(f"[user's hint / instruction]\n{ADVICE[2]}\nThat doesn't answer my question at all."
                         "<|im_end|>\n<|im_start|>assistant\n")
    assert missing_from("Keep it short.", []) == ()


def test_the_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="standing_instructions"):
        TrainConfig(standing_instructions=-1)
    with pytest.raises(ValueError, match="standing_min_sessions"):
        TrainConfig(standing_min_sessions=0)
