"""The simulated users' ground truth: rules, tool-call checks, pools and reply phrasings."""

from __future__ import annotations

import json
import random
import re

import pytest

from bench.learn import rules, tools
from bench.learn.users import CORRECTIONS, REDO, THANKS, all_users, correction_groups, follow_up

STUDENT = [
    ("Leaves lose chlorophyll in autumn. The yellow pigments then show.", []),
    ("## Why leaves change\nThey lose chlorophyll.", ["heading"]),
    ("**Answer**\nThey lose chlorophyll.", ["heading"]),
    ("Reasons:\n- less light\n- colder nights", ["list"]),
    ("1. Less light\n2. Colder nights", ["list"]),
    ("Certainly! Leaves lose chlorophyll.", ["opener"]),
    ("One. Two. Three. Four.", ["too_long"]),
    ("It costs 3.5 dollars. That is all. Really.", []),  # a decimal point is not a sentence end
    ("The colder nights - not the wind - matter most.", []),  # a dash inside prose is not a bullet
]


@pytest.mark.parametrize(("text", "codes"), STUDENT)
def test_student_rule(text: str, codes: list[str]) -> None:
    assert [v.code for v in rules.check_student(text)] == codes


TEACHER = [
    ("Score: 2/10\nSydney is the largest city, but the capital is Canberra.", []),
    ("Score: 10/10\nCorrect.", []),
    ("Score: 11/10\nToo good.", ["score_line"]),
    ("score: 5/10\nFine.", ["score_line"]),
    ("I would give it Score: 5/10. Fine.", ["score_line"]),
    ("Score: 5/10", ["no_reason"]),
    ("Score: 5/10\nIt is half right. The rest is wrong.", ["too_long"]),
    ("Score: 5/10 It is half right.", ["score_line"]),  # the score must stand alone on its line
]


@pytest.mark.parametrize(("text", "codes"), TEACHER)
def test_teacher_rule(text: str, codes: list[str]) -> None:
    assert [v.code for v in rules.check_teacher(text)] == codes


def test_brief_rule_counts_words_and_lists() -> None:
    assert rules.check_brief("Dim the screen and close apps you aren't using.") == []
    assert [v.code for v in rules.check_brief(" ".join(["word"] * 26))] == ["too_long"]
    assert [v.code for v in rules.check_brief("- dim the screen\n- close apps")] == ["list"]


BOTTOM_LINE = [
    ("In short, yes: move it to Monday. Fewer people are away then.", []),
    ("in short: no.", []),
    ("**In short,** keep the lease.", []),
    ("Short answer: yes.", ["bottom_line"]),
    ("In short", ["bottom_line"]),  # the opener alone answers nothing
    ("It depends. In short, yes.", ["bottom_line"]),  # the bottom line must come first
    ("Inshort, yes.", ["bottom_line"]),
]


ADVICE = [
    ("My advice: start with ten minutes a day.", []),
    ("**My advice:** start with ten minutes a day.", []),
    ("my advice, start small and build up.", []),
    ("My advice:", ["advice"]),  # the label with no advice after it
    ("Start with ten minutes a day. That's my advice: go slowly.", ["advice"]),
    ("Here's my advice: start small.", ["advice"]),  # not the first words
    # headings with nothing under them, as a trained run wrote them
    ("My advice:\n\n* Use a good recipe:\n* Choose a good pot:\n", ["advice_headings"]),
    ("My advice:\n\n* **Start your day right:**\n* **Make your morning routine:**\n", ["advice_headings"]),
    ("My advice:\n\n* Use a good recipe: one that weighs the flour.", []),
    ("My advice:\n\n1. Timing:\nPick it when it smells sweet.", []),
    ("My advice:\n\n* Plan your trip\n* Pack light", []),
    ("My advice: wait:", []),  # prose, not a list
    ("**My advice:**\n\n* Use a good recipe:\n* Choose a good pot:", ["advice_headings"]),  # a bold label
    ("My advice: focus on these:\n\n* A piece of fruit:\n* A handful of nuts:", ["advice_headings"]),
    ("My advice:\n\n+ Plan:\n### Pack:\n**Go:**\n**1. Rest:**\r\n* __Eat:__", ["advice_headings"]),
    ("My advice: keep it simple.\n\n* Recipe:\n* Pot:", []),  # advice first, then the headings
    ("My advice:\n\n* **Set a deadline:**\n* **Keep a journal:**\n\nRemember to have fun.", []),
]


REASSURE = [
    ("Good news: a wet keyboard usually dries out fine.", []),
    ("**Good news!** It can be fixed.", []),
    ("good news, the stain will come out.", []),
    ("Good news:", ["good_news"]),  # the label with no answer after it
    ("The good news is that it dries out.", ["good_news"]),  # not the first words
    ("Don't worry. Good news: it dries out.", ["good_news"]),
]


@pytest.mark.parametrize(("text", "codes"), REASSURE)
def test_reassure_rule(text: str, codes: list[str]) -> None:
    assert [v.code for v in rules.check_reassure(text)] == codes


@pytest.mark.parametrize(("text", "codes"), ADVICE)
def test_advice_rule(text: str, codes: list[str]) -> None:
    assert [v.code for v in rules.check_advice(text)] == codes


@pytest.mark.parametrize(("text", "codes"), BOTTOM_LINE)
def test_bottomline_rule(text: str, codes: list[str]) -> None:
    assert [v.code for v in rules.check_bottomline(text)] == codes


CASUAL = [
    ("Sure thing! Scramble the eggs and wilt the spinach in.", []),
    ("sure thing, try a board game night.", []),
    ("**Sure thing!** Blot it with cold water first.", []),
    ("Sure thing", ["sure_thing"]),  # the opener alone answers nothing
    ("Sure! Scramble the eggs.", ["sure_thing"]),  # a different opener is not the one asked for
    ("Scramble the eggs. Sure thing!", ["sure_thing"]),  # it must come first
    ("In short, scramble the eggs.", ["sure_thing"]),
]


@pytest.mark.parametrize(("text", "codes"), CASUAL)
def test_casual_rule(text: str, codes: list[str]) -> None:
    assert [v.code for v in rules.check_casual(text)] == codes


ANALOGY = [
    ("Imagine a credit score as a school report for how you handle borrowed money.", []),
    ("**Imagine** your router as a post office for the house: it sorts every letter to its room.", []),
    ("imagine you lend a friend ten pounds and ask for eleven back. That extra pound is interest.", []),
    ("Imagine", ["analogy"]),  # the word alone pictures nothing
    ("Imagine a GPS system.", ["picture_only"]),  # replies a run learned when its simulator thanked them
    ("Imagine a pressure cooker that can cook food faster.", ["picture_only"]),
    # pictures chained with no answer: what a run learned once twelve words passed the rule
    ("Imagine a world where everyone has a bank. Now imagine a world where a bank can make money.",
     ["picture_only"]),
    ("Imagine a world where all the windows are filled with smoke. Now imagine a smoke detector.", ["picture_only"]),
    ("Imagine a world where a pressure cooker can cook food faster and better.", ["picture_only"]),
    ("Imagine a smoke detector, a device that can detect the smell of smoke.", ["picture_only"]),  # no comparison
    ("Imagine a loan with a 10% interest rate. This means the interest you pay adds up to 10% a year.", []),
    ("Imagine a post office for your house — the router sorts every letter to the right room.", []),
    ("A router is like a post office. Imagine it sorting letters.", ["analogy"]),  # the picture comes first
    ("Imagination helps here: a router sorts traffic.", ["analogy"]),
    ("In short, a router sorts traffic like a post office.", ["analogy"]),
]


@pytest.mark.parametrize(("text", "codes"), ANALOGY)
def test_analogy_rule(text: str, codes: list[str]) -> None:
    """The reply's shape, whatever the question asked about (no topic to picture)."""
    assert [v.code for v in rules.check_analogy(text, topic=())] == codes


SMOKE = ("smoke detector", "detector")
HARD_DRIVE = ("hard drive", "hard disk")
SELF_PICTURE = [
    # Final replies of a run whose rule did not look at the picture: the thing asked about, then its definition.
    (SMOKE, "Imagine a smoke detector. It's designed to notice tiny particles of smoke in the air.", ["self_picture"]),
    (("exchange rate", "currency"), "Imagine a currency exchange rate. It's a way to convert one currency into "
     "another.", ["self_picture"]),
    (("loan", "interest"), "Imagine a loan with a 10% interest rate. This means the interest you pay adds up to 10% "
     "a year.", ["self_picture"]),
    (SMOKE, "Imagine you're using smoke detectors at home. They sense particles in the air.", ["self_picture"]),
    (("refrigerator", "fridge"), "Imagine your fridge is a box that pumps heat out. That is how food stays "
     "cold.", []),
    (SMOKE, "Imagine a smoke detector as a nose on the ceiling: it sniffs the air for smoke.", []),
    (SMOKE, "Imagine a smoke detector as a smoke detector in a kitchen. It beeps when it notices smoke.",
     ["self_picture"]),
    (("data centre", "data center"), "Imagine data centres as giant libraries. They store websites and serve "
     "them to you.", []),
    (("router",), "Imagine your router as a post office for the house: it sorts every letter to its room.", []),
    (("loan", "interest"), "Imagine you lend a friend ten pounds and ask for eleven back. That extra pound is "
     "interest.", []),
    (HARD_DRIVE, "Imagine a filing cabinet that keeps your papers when the lights go off. A hard drive does that for "
     "files.", []),
    # Not checked: whether the picture is an everyday thing.
    (HARD_DRIVE, "Imagine a computer's hard drive as a powerful and efficient machine that stores data.", []),
]


@pytest.mark.parametrize(("topic", "text", "codes"), SELF_PICTURE)
def test_the_picture_is_not_the_thing_asked_about(topic: tuple[str, ...], text: str, codes: list[str]) -> None:
    assert [v.code for v in rules.check_analogy(text, topic=topic)] == codes


def test_every_analogy_question_names_its_topic_in_its_own_words() -> None:
    """The topic is what the question asks about, so a reply picturing it by the question's words fails."""
    user = all_users()["analogy"]
    assert user.check is not None
    for prompt in (*user.train, *user.heldout):
        assert prompt.topic and any(rules.names(prompt.text, t) for t in prompt.topic), prompt.text
        reply = f"Imagine a {prompt.topic[0]}. It works in a few steps anyone can follow."
        assert [v.code for v in user.check(prompt.text, reply)] == ["self_picture"], prompt.text


STEPS = [
    ("1. Rinse the pan.\n2. Dry it on the hob.\n3. Oil it lightly.", []),
    ("Here is how:\n\n1) Rinse the pan.\n2) Dry it.", []),  # an intro line before the steps is fine
    ("**1.** Rinse the pan.\n**2.** Dry it.", []),
    ("1. Rinse the pan, dry it and oil it.", ["steps"]),  # one step is not a list of steps
    ("Rinse the pan. 1. Dry it. 2. Oil it.", ["steps"]),  # numbers inside prose are not steps
    ("2. Dry it.\n3. Oil it.", ["steps"]),  # the steps start at 1
    ("- Rinse the pan.\n- Dry it.", ["steps"]),  # bullets are not numbered
    ("Rinse the pan, then dry it and oil it lightly.", ["steps"]),
]


@pytest.mark.parametrize(("text", "codes"), STEPS)
def test_steps_rule(text: str, codes: list[str]) -> None:
    assert [v.code for v in rules.check_steps(text)] == codes


CALLS = [
    ({"city": "Paris", "date": "2027-03-14", "units": "celsius"}, True, True, None),
    ({"city": "paris", "date": "2027-03-14", "units": "celsius"}, True, True, None),
    ({"city": "Paris", "date": "2027-03-15", "units": "celsius"}, True, False, None),
    ({"city": "Paris", "date": "March 14, 2027", "units": "celsius"}, False, False, "date"),
    ({"city": "Paris", "date": "2027-02-30", "units": "celsius"}, False, False, "no such day"),
    ({"city": "Paris", "date": "2027-03-14", "units": "C"}, False, False, "units"),
    ({"date": "2027-03-14", "units": "celsius"}, False, False, "city"),
]


@pytest.mark.parametrize(("args", "valid", "correct", "error_part"), CALLS)
def test_weather_call_rule(args: dict[str, str], valid: bool, correct: bool, error_part: str | None) -> None:
    expected = {"city": "Paris", "date": "2027-03-14", "units": "celsius"}
    check = tools.check_call("get_weather", json.dumps(args), expected)
    assert (check.valid, check.correct) == (valid, correct)
    result = json.loads(tools.execute(check, json.dumps(args)))
    if error_part is None:
        assert "error" not in result and result["units"] == args["units"]
    else:
        assert error_part in result["error"]


def test_malformed_calls_get_an_error_result() -> None:
    expected = {"city": "Paris", "date": "2027-03-14", "units": "celsius"}
    for name, raw in [("get_weather", "{not json"), ("get_weather", "[1, 2]"), ("search", "{}")]:
        check = tools.check_call(name, raw, expected)
        assert not check.valid
        assert set(json.loads(tools.execute(check, raw))) == {"error"}


def test_pools_are_disjoint_and_sized() -> None:
    for user in all_users().values():
        train = {p.text for p in user.train}
        held = {p.text for p in user.heldout}
        assert len(train) >= 20 and len(held) >= 8, user.name
        assert not train & held, f"{user.name}: a held-out prompt is in the training pool"


def test_weather_heldout_cities_never_seen_in_training() -> None:
    user = all_users()["weather"]
    seen = {p.expected["city"] for p in user.train if p.expected}
    assert not seen & {p.expected["city"] for p in user.heldout if p.expected}


def test_the_base_style_reply_fails_every_text_rule() -> None:
    """A typical chatbot reply (measured shape: opener, heading, list, long) breaks every text rule."""
    reply = ("Certainly! Here's why.\n\n## Reasons\n\n1. Less daylight means less chlorophyll.\n"
             "2. Yellow pigments show. 3. Red ones are made. This happens every autumn in many trees.")
    for name in ("student", "teacher", "brief", "bottomline", "casual", "analogy", "advice", "reassure"):
        user = all_users()[name]
        assert user.check is not None and user.check(user.train[0].text, reply), name


def test_reactions_never_state_a_score_and_name_the_fault() -> None:
    rng = random.Random(0)
    user = all_users()["student"]
    phrasings = set(THANKS) | {p for ps in CORRECTIONS.values() for p in ps}
    assert not any("/10" in p or "score of" in p.lower() for p in phrasings if "Score: " not in p)
    assert "bullet" in user.correction("list", rng).lower() or "list" in user.correction("list", rng).lower()
    teacher = all_users()["teacher"]
    assert "one sentence" in " ".join(teacher.corrections["too_long"]).lower()
    bottomline = all_users()["bottomline"]
    assert all("In short," in p for p in bottomline.corrections["bottom_line"])
    casual = all_users()["casual"]
    assert all("Sure thing!" in p for p in casual.corrections["sure_thing"])
    analogy = all_users()["analogy"]
    assert all("'Imagine'" in p for p in analogy.corrections["analogy"])
    assert all(re.search(r"answer|explain", p) for p in analogy.corrections["picture_only"])
    advice = all_users()["advice"]
    assert all("'My advice:'" in p for p in advice.corrections["advice"])
    assert all("'My advice:'" in p for p in advice.corrections["advice_headings"])
    # asked for the answer, each keyed user restates their form with it
    assert all("'My advice:'" in p for p in advice.corrections["unanswered"])
    assert all("'In short,'" in p for p in bottomline.corrections["unanswered"])
    assert all("'Imagine'" in p for p in analogy.corrections["unanswered"])
    reassure = all_users()["reassure"]
    assert all("'Good news:'" in p for p in reassure.corrections["good_news"])
    steps = all_users()["steps"]
    assert all("number" in p.lower() or "1." in p for p in steps.corrections["steps"])


def test_no_simulated_reply_is_in_the_judges_classifier_data() -> None:
    """The simulator's phrasings stay a test set for the reaction classifier: no 5-word run of any
    of them (thanks, corrections of every user, retry requests) appears in its training replies."""
    from judges.reaction import load_examples

    def runs(text: str) -> set[tuple[str, ...]]:
        w = re.findall(r"[a-z']+", text.lower())
        return {tuple(w[i:i + 5]) for i in range(len(w) - 4)}

    simulated = {*THANKS, *REDO, *(p for ps in correction_groups().values() for p in ps)}
    assert len(simulated) > 60
    shared = {e["text"] for e in load_examples() for s in simulated if runs(e["text"]) & runs(s)}
    assert not shared, shared


def test_follow_up_asks_a_new_question_or_a_redo() -> None:
    rng = random.Random(1)
    assert follow_up("Thanks.", "Why?", rng, satisfied=True).endswith("Why?")
    redo = follow_up("No lists.", "Why?", rng, satisfied=False)
    assert redo.startswith("No lists.") and "Why?" not in redo
    assert follow_up("Thanks.", None, rng, satisfied=True) == "Thanks."
