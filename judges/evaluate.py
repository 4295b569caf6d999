"""Judge reliability against human labels: confusion matrix, leniency, strictness, kappa.

Cases come from a labelled JSONL file (each line: `request`, `response`, `tool_calls`,
`next_state`, `label` in -1/0/1) judged afresh by one stage or the cascade, or from the DB (turns
with a human label, compared with the score the judge stored).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.models import Turn
from core.settings import Settings
from core.turns import latest_label
from judges.client import JudgeClient
from judges.pipeline import decide, reaction_for
from judges.prompts import JudgeInput, render_output

CLASSES = (-1, 0, 1)
Stage = Literal["signal", "reaction", "votes", "cascade"]
STAGE_FLAGS: dict[str, dict[str, bool]] = {
    "signal": {"judge_signals": True, "judge_reaction": False, "judge_llm_votes": False},
    "reaction": {"judge_signals": False, "judge_reaction": True, "judge_llm_votes": False},
    "votes": {"judge_signals": False, "judge_reaction": False, "judge_llm_votes": True},
    "cascade": {"judge_signals": True, "judge_reaction": True, "judge_llm_votes": True},
}


@dataclass(frozen=True)
class Case:
    id: str
    inp: JudgeInput
    gold: int


@dataclass
class Report:
    """Judge scores against gold labels; `unparsed` counts cases whose votes were all unparseable."""

    gold: list[int] = field(default_factory=list)
    judged: list[int] = field(default_factory=list)
    unparsed: int = 0
    sources: dict[str, int] = field(default_factory=dict)

    def add(self, gold: int, judged: int, *, unparsed: bool = False, source: str | None = None) -> None:
        self.gold.append(gold)
        self.judged.append(judged)
        self.unparsed += int(unparsed)
        if source:
            self.sources[source] = self.sources.get(source, 0) + 1

    def metrics(self) -> dict[str, Any]:
        return metrics(self.gold, self.judged, unparsed=self.unparsed)


def load_cases(path: Path) -> list[Case]:
    cases = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        row = json.loads(line)
        inp = JudgeInput(
            request=row["request"],
            output=render_output(row.get("response", ""), row.get("tool_calls")),
            next_state=row["next_state"],
        )
        cases.append(Case(str(row.get("id", n)), inp, int(row["label"])))
    return cases


def evaluate_cases(
    cases: Sequence[Case], stage: Stage, settings: Settings, client: JudgeClient | None
) -> Report:
    """Judge every case with one stage alone (undecided counts as 0) or the whole cascade."""
    staged = settings.model_copy(update=STAGE_FLAGS[stage])
    reaction = reaction_for(staged)
    report = Report()
    for case in cases:
        decision = decide(case.inp, client, staged, reaction)
        report.add(case.gold, decision.score, unparsed=decision.status == "unparsed", source=decision.source)
    return report


def evaluate_db(session: Session) -> Report:
    """Stored judge scores against the newest human label of each labelled, judged turn."""
    report = Report()
    turns = session.scalars(select(Turn).where(Turn.score.is_not(None), Turn.labels.any()).order_by(Turn.id))
    for turn in turns:
        label = latest_label(session, turn.id)
        if label is not None and turn.score is not None:
            report.add(label.value, turn.score, unparsed=turn.judge_status == "unparsed",
                       source=turn.score_source)
    return report


def metrics(gold: Sequence[int], judged: Sequence[int], *, unparsed: int = 0) -> dict[str, Any]:
    """Confusion matrix (rows gold -1/0/1, columns judge), accuracy, leniency, strictness, kappa."""
    n = len(gold)
    matrix = [[sum(1 for g, j in zip(gold, judged, strict=True) if g == gc and j == jc) for jc in CLASSES]
              for gc in CLASSES]
    accuracy = _ratio(sum(matrix[i][i] for i in range(3)), n)
    neg = [j for g, j in zip(gold, judged, strict=True) if g == -1]
    nonneg = [j for g, j in zip(gold, judged, strict=True) if g >= 0]
    called_neg = [g for g, j in zip(gold, judged, strict=True) if j == -1]
    return {
        "n": n,
        "matrix": matrix,
        "accuracy": accuracy,
        "leniency": _ratio(sum(1 for j in neg if j >= 0), len(neg)),
        "strictness": _ratio(sum(1 for j in nonneg if j == -1), len(nonneg)),
        "precision_neg": _ratio(sum(1 for g in called_neg if g == -1), len(called_neg)),
        "kappa": cohen_kappa(matrix),
        "unparsed_rate": _ratio(unparsed, n),
        "baseline_accuracy": _ratio(sum(1 for g in gold if g == 1), n),  # always +1
    }


def cohen_kappa(matrix: list[list[int]]) -> float | None:
    n = sum(map(sum, matrix))
    if n == 0:
        return None
    observed = sum(matrix[i][i] for i in range(len(matrix))) / n
    rows = [sum(r) / n for r in matrix]
    cols = [sum(matrix[i][j] for i in range(len(matrix))) / n for j in range(len(matrix))]
    expected = sum(r * c for r, c in zip(rows, cols, strict=True))
    if expected == 1.0:
        return 1.0 if observed == 1.0 else 0.0
    return (observed - expected) / (1.0 - expected)


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
