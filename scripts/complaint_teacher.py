"""What the hinted teacher raises, by hint source, on a kept run's hinted main turns.

    python scripts/complaint_teacher.py RUN.db    (CPU, a few seconds per hinted turn)
    (RUN.db: a run's learnproxy.db, left by `learnproxy bench learn --keep DIR`)

For each hinted main turn, the base model is shown the turn's teacher context (the conversation
plus the hint, as the learner builds it) and writes its greedy 14-token opening: what the teacher
would say. The token-level distillation advantage is then read on the student's own logged reply,
with the base model as both teacher (hinted) and student (unhinted), so it shows the hint's pull
alone: the reply tokens it scores more than 1 nat above the unhinted model are counted, each with
the two tokens before it. Grouped by where the hint came from: `instruction` (the user said what
to do) or `correction` (the user only said what was wrong). This is why `opd_complaints` exists.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.modelload import load_model, load_tokenizer, resolve_model_path  # noqa: E402
from core.settings import Settings  # noqa: E402
from learner.config import TrainConfig  # noqa: E402
from learner.logprobs import pack, token_stats  # noqa: E402
from learner.samples import Sample, teacher_prompt_ids, to_sample  # noqa: E402

OPENING_TOKENS = 14
RAISED_NATS = 1.0


def hinted_samples(db: Path, settings: Settings) -> list[Sample]:
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from core.models import Turn

    with Session(create_engine(f"sqlite:///file:{db}?mode=ro&uri=true")) as s:
        query = select(Turn).where(Turn.hint.is_not(None), Turn.turn_type == "main").order_by(Turn.id)
        samples = [to_sample(s, settings, TrainConfig(), t) for t in s.scalars(query)]
    return [x for x in samples if x is not None]


def main(db: Path) -> None:
    import torch

    settings = Settings()
    path = resolve_model_path(settings.model, settings.models_dir)
    tokenizer, model = load_tokenizer(path), load_model(path, device="cpu", dtype="float32").eval()

    def logprobs(prompt: list[int], reply: list[int]) -> torch.Tensor:  # as the learner scores them
        with torch.no_grad():
            return token_stats(model, pack([prompt], [reply], "cpu")).logprobs

    openings: dict[str | None, list[tuple[str, str]]] = defaultdict(list)
    raised: dict[str | None, Counter[str]] = defaultdict(Counter)
    for sample in hinted_samples(db, settings):
        teacher = teacher_prompt_ids(tokenizer, sample)
        with torch.no_grad():
            out = model.generate(torch.tensor([teacher]), max_new_tokens=OPENING_TOKENS, do_sample=False)
        openings[sample.hint_source].append((sample.hint or "", tokenizer.decode(out[0, len(teacher):])))
        reply = sample.response_ids
        advantage = logprobs(teacher, reply) - logprobs(sample.prompt_ids, reply)
        for i in torch.nonzero(advantage > RAISED_NATS)[:, 0].tolist():
            raised[sample.hint_source][tokenizer.decode(reply[max(0, i - 2):i + 1])] += 1
    for source, rows in openings.items():
        print(f"\n== hint source {source}: {len(rows)} hinted turns; the teacher's greedy opening")
        for hint, opening in rows:
            print(f"  [{hint[:50]}] -> {opening!r}")
        print(f"  reply tokens raised by more than {RAISED_NATS} nat (with the two before): "
              f"{raised[source].most_common(15)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("db", type=Path)
    main(parser.parse_args().db)
