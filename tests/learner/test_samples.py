"""Sample selection from a real SQLite DB: methods, baselines' inputs, staleness, labels, teacher context."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.orm import Session

from core.models import AdapterState, AdapterVersion, TurnStatus
from core.settings import Settings
from learner.config import TrainConfig
from learner.samples import HINT_HEADER, collect_samples, staleness, teacher_messages, teacher_prompt_ids
from tests.learner.factories import TurnMaker


def _versions(db: Session, n: int) -> list[AdapterVersion]:
    rows = [AdapterVersion(name=f"v{i}-test", state=AdapterState.retired, base_model="m", method="rl")
            for i in range(n)]
    db.add_all(rows)
    db.flush()
    return rows


def test_methods_select_the_right_turns(settings: Settings, db: Session, maker: TurnMaker) -> None:
    maker.add(db, "a", "x", score=1)
    maker.add(db, "b", "y", score=0, hint="say more please")
    maker.add(db, "c", "z", score=-1, hint="be nicer to people")
    maker.add(db, "d", "w", score=0)  # nothing to learn from
    maker.add(db, "e", "v", score=1, status=TurnStatus.trained)
    picked = {}
    for method in ("rl", "opd", "combined"):
        got = collect_samples(db, settings, TrainConfig(method=method, batch_size=10))  # type: ignore[arg-type]
        picked[method] = [(s.score, s.hint is not None) for s in got.samples]
    assert picked["rl"] == [(1, False), (-1, False)]
    assert picked["opd"] == [(0, True), (0, True)]
    assert picked["combined"] == [(1, False), (0, True), (-1, True)]


def test_stale_turns_are_dropped_and_counted(settings: Settings, db: Session, maker: TurnMaker) -> None:
    v = _versions(db, 4)
    old = maker.add(db, "a", "x", score=1, served_by=v[0].id)  # 3 versions since
    maker.add(db, "b", "y", score=1, served_by=v[2].id)  # 1 version since
    maker.add(db, "c", "z", score=-1)  # the base model: 4 versions since
    assert staleness([v.id for v in v], v[0].id) == 3
    got = collect_samples(db, settings, TrainConfig(max_staleness=2, batch_size=10))
    assert got.n_stale == 2
    assert [s.score for s in got.samples] == [1]
    assert old.status == TurnStatus.skipped and old.advantage == {"dropped": "stale", "staleness": 3}
    again = collect_samples(db, settings, TrainConfig(max_staleness=2, batch_size=10))
    assert again.n_stale == 0  # counted once: marked turns are not candidates any more


@pytest.mark.parametrize("override", [True, False])
def test_human_label_overrides_judge(settings: Settings, db: Session, maker: TurnMaker,
                                     override: bool) -> None:
    cfg = settings.model_copy(update={"labels_override": override})
    judged = maker.add(db, "a", "x", score=1)
    maker.label(db, judged, -1, hint="answer in French please")
    unjudged = maker.add(db, "b", "y", status=TurnStatus.awaiting_next_state)
    maker.label(db, unjudged, 1)
    got = collect_samples(db, cfg, TrainConfig(batch_size=10))
    if override:
        assert [(s.turn_id, s.score, s.hint, s.source, s.hint_source) for s in got.samples] == [
            (judged.id, -1, "answer in French please", "label", "label"), (unjudged.id, 1, None, "label", None)]
        assert got.n_labelled == 2
    else:
        assert [(s.turn_id, s.score, s.hint, s.source) for s in got.samples] == [(judged.id, 1, None, "judge")]


def test_teacher_context_appends_hint_and_renders_tools(maker: TurnMaker) -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "list files"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"path\": \".\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
    ]
    out = teacher_messages(msgs, "use ls -la")
    assert out[1] == {"role": "user", "content": "list files" + HINT_HEADER + "use ls -la"}
    assert out[2]["content"] == '<tool_call>\n{"name": "ls", "arguments": {"path": "."}}\n</tool_call>'
    assert out[3] == {"role": "user", "content": "<tool_response>\na.txt\n</tool_response>"}
    no_user = teacher_messages([{"role": "system", "content": "sys"}], "be brief")
    assert no_user[-1] == {"role": "user", "content": "[user's hint / instruction]\nbe brief"}


def test_teacher_prompt_ids_are_the_hinted_chat_template(settings: Settings, db: Session,
                                                         maker: TurnMaker) -> None:
    maker.add(db, "What is 2+2?", "5", score=-1, hint="the answer is 4")
    sample = collect_samples(db, settings, TrainConfig(batch_size=1)).samples[0]
    text = maker.tokenizer.decode(teacher_prompt_ids(maker.tokenizer, sample))
    assert text.endswith("What is 2+2?\n\n[user's hint / instruction]\nthe answer is 4<|im_end|>\n"
                         "<|im_start|>assistant\n")
    assert sample.prompt_ids == maker.prompt_ids([{"role": "user", "content": "What is 2+2?"}])
