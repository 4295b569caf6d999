"""PRM parsing over real raw outputs, the voting rules, hint parsing and the prompt templates.

`data/smollm2_raw.jsonl` holds real SmolLM2-135M-Instruct samples on the shipped prompts (made by
`collect_smollm2_outputs.py`); the expected parse of each was decided by reading it. The
larger-model outputs below are hand-written in the shapes such models produce.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judges.hints import parse_hint, select_hint
from judges.prm import majority, parse_score, unanimous_negative
from judges.prompts import PromptTemplate, TemplateError, cut, load_template

HERE = Path(__file__).resolve().parent

LARGER_MODEL_OUTPUTS = [
    ("The tool returned the file listing the user asked for, and the user thanked the assistant.\n\n"
     "\\boxed{1}", 1),
    ("The user says the answer is wrong (17*3 is 51, not 41). This is a correction.\n\nFinal answer: "
     "\\boxed{-1}", -1),
    ("**Analysis.** The next state is a follow-up question; it says nothing about the quality.\n\n"
     "$$\\boxed{0}$$", 0),
    ("At first glance this looks like \\boxed{1}, but the tool result contains an ENOENT error, so the "
     "call failed.\n\n\\boxed{-1}", -1),  # the last boxed value wins
    ("Score: $\\boxed{\\text{-1}}$", -1),
    ("The response is good. \\boxed{+1}", 1),
    ("\\boxed{ 1 }", 1),
    ("\\boxed{1.0}", 1),
    ("The final score is \\boxed{-1}.\n\nWait, let me reconsider. The user moved on without complaint, so "
     "the answer is probably fine: \\boxed{1}", 1),
    ("The response failed. Score: -1", None),  # no box: unparseable, never a silent 0
    ("I would rate this \\boxed{2}", None),
    ("\\boxed{good}", None),
    ("\\boxed{-1} or \\boxed{0}, hard to say. \\boxed{", None),  # cut off inside the last box
    ("\\boxed{1/2}", None),
    ("", None),
]

SMOLLM2 = [json.loads(line) for line in (HERE / "data" / "smollm2_raw.jsonl").read_text().splitlines()
           if line.strip()]


@pytest.mark.parametrize(("raw", "expected"), LARGER_MODEL_OUTPUTS)
def test_parse_larger_model_outputs(raw: str, expected: int | None) -> None:
    assert parse_score(raw) == expected


@pytest.mark.parametrize("row", SMOLLM2, ids=[f"{r['template']}-{i}" for i, r in enumerate(SMOLLM2)])
def test_parse_real_smollm2_outputs(row: dict[str, object]) -> None:
    raw = str(row["raw"])
    assert parse_score(raw) == row["expected_score"], raw
    if row["template"] == "hint":
        assert parse_hint(raw, 10) == row.get("expected_hint"), raw


def test_majority_tie_and_unparsed_rules() -> None:
    assert majority([1, 1, -1]) == (1, "ok")
    assert majority([-1, None, -1]) == (-1, "ok")
    assert majority([1, -1, None]) == (0, "ok")  # tie between the valid votes
    assert majority([1, -1, 0]) == (0, "ok")  # three-way tie
    assert majority([0, 0, 1]) == (0, "ok")
    assert majority([None, None, None]) == (0, "unparsed")
    assert majority([]) == (0, "unparsed")
    assert majority([None, None, -1]) == (-1, "ok")  # one valid vote decides


def test_unanimous_negative_counts_valid_votes_only() -> None:
    assert unanimous_negative([-1, -1, None])
    assert not unanimous_negative([-1, -1, 1])
    assert not unanimous_negative([None, None])


def test_hint_parsing_and_selection() -> None:
    good = "\\boxed{1}\n[HINT_START]  The port is set in config.yaml\nunder server.port.  [HINT_END]"
    assert parse_hint(good, 10) == "The port is set in config.yaml under server.port."
    assert parse_hint("\\boxed{-1}\n[HINT_START]The port is in config.yaml.[HINT_END]", 10) is None
    assert parse_hint("\\boxed{1}\n[HINT_START]short[HINT_END]", 10) is None
    assert parse_hint("\\boxed{1} but no hint markers", 10) is None
    two = "\\boxed{1}\n[HINT_START]first draft hint[HINT_END] better: [HINT_START]second, final hint[HINT_END]"
    assert parse_hint(two, 10) == "second, final hint"
    candidates = ["a medium length hint", None, "the longest hint of all three", "tiny"]
    assert select_hint(candidates, "longest", 10) == "the longest hint of all three"
    assert select_hint(candidates, "shortest", 10) == "a medium length hint"
    assert select_hint([None, "tiny"], "longest", 10) is None


def test_templates_check_their_variables_and_carry_a_version() -> None:
    for name in ("prm", "hint"):
        template = load_template(name)
        assert template.variables == {"request", "response", "next_state"}
        assert len(template.version) == 12
        with pytest.raises(TemplateError, match="missing"):
            template.render(request="r", response="a")
    edited = PromptTemplate("prm", load_template("prm").text + " ")
    assert edited.version != load_template("prm").version
    with pytest.raises(TemplateError, match="unused"):
        PromptTemplate("t", "$a").render(a="1", b="2")


def test_inputs_are_cut_keeping_head_and_tail() -> None:
    text = "HEAD" + "x" * 10_000 + "TAIL: Error at line 9"
    short = cut(text, 400)
    assert len(short) < 500 and short.startswith("HEAD") and short.endswith("TAIL: Error at line 9")
    assert cut("short", 400) == "short"
