"""What would the hinted teacher write for each hinted turn of a benchmark run? Teacher rollouts as the
learner makes them (base weights, greedy, the turn's own token budget), from a copy of the run's DB.

    python scripts/rollout_probe.py RUN.db [--user bottomline]
    (RUN.db: a run's learnproxy.db, left by `learnproxy bench learn --keep DIR` under DIR/<run>/)

For every hinted main turn: does the rollout meet the user's rule and pass the benchmark's quality
guard against the session's question, and would the learner's rollout screen (learner.rollouts.screen,
TrainConfig defaults) keep it? Its gain is taken with the base model as the student, which is the
student of a run's first batch only. Counted apart for hints that state the rule (they quote the
rule's words) and for the other complaints, and for first turns against redo turns.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def current_question(messages: list[dict], pool: list[str]) -> str:
    """The training question the turn answers: the latest one a user message carries."""
    for m in reversed(messages):
        if m["role"] == "user" and isinstance(m["content"], str):
            found = [q for q in pool if q in m["content"]]
            if found:
                return found[0]
    raise ValueError("no training question in the session")


def main(db: Path, user_name: str) -> None:
    import torch
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from bench.learn.quality import QualityGuard
    from bench.learn.users import all_users
    from core.modelload import eos_token_ids, load_model, load_tokenizer, resolve_model_path
    from core.models import Turn
    from core.settings import Settings
    from core.turns import view_of
    from learner.config import TrainConfig
    from learner.rollouts import gains, generate, scored, screen
    from learner.samples import Sample, assistant_texts, teacher_prompt_ids

    torch.set_num_threads(2)
    user, guard = all_users()[user_name], QualityGuard()
    assert user.check is not None
    path = str(resolve_model_path(Settings().model, Settings().models_dir))
    tok, model = load_tokenizer(path), load_model(path, device="cpu", dtype="float32")
    eos = eos_token_ids(model, tok)
    rows = []
    with Session(create_engine(f"sqlite:///file:{db}?mode=ro&uri=true")) as s:
        for turn in s.scalars(select(Turn).where(Turn.hint.is_not(None), Turn.turn_type == "main")):
            view = view_of(s, turn)
            sample = Sample(turn.id, view.prompt_token_ids, view.response_token_ids, view.response_logprobs, 0,
                            turn.hint, messages=view.messages)
            question = current_question(view.messages, [q.text for q in user.train])
            rows.append((turn, sample, question, (turn.params or {}).get("max_new_tokens", 64)))
    cfg = TrainConfig()
    thresholds = {"min_gain": cfg.rollout_min_gain, "max_echo": cfg.rollout_max_echo, "max_copy": cfg.rollout_max_copy}

    counts: Counter[tuple[str, str, str]] = Counter()
    for start in range(0, len(rows), 8):
        batch = rows[start:start + 8]
        prompts = [teacher_prompt_ids(tok, sample) for _, sample, _, _ in batch]
        replies = generate(model, prompts, [b for *_, b in batch], eos_ids=eos, pad_id=eos[0], temperature=0.0,
                           device="cpu")
        written = [(b, ids, p) for b, ids, p in zip(batch, replies, prompts, strict=True) if ids]
        found = gains(scored(model, [p for *_, p in written], [ids for _, ids, _ in written],
                             device="cpu", chunk=cfg.logprob_chunk),
                      scored(model, [b[1].prompt_ids for b, *_ in written], [ids for _, ids, _ in written],
                             device="cpu", chunk=cfg.logprob_chunk))
        for ((turn, sample, question, _), ids, _), gain in zip(written, found, strict=True):
            text = tok.decode(ids, skip_special_tokens=True)
            kind = "states the rule" if "in short" in (sample.hint or "").lower() else "other complaint"
            when = "first turn" if turn.turn_index == 0 else "redo turn"
            passed = guard.check(question, text).passed
            met = passed and not user.check(question, text)
            verdict = screen(text, hint=sample.hint or "", earlier=assistant_texts(sample.messages), gain=gain,
                            **thresholds)
            for key, on in (("n", True), ("met", met), ("on topic", passed), ("kept", verdict.kept),
                            ("kept and met", verdict.kept and met), ("kept, off topic", verdict.kept and not passed)):
                if on:
                    counts[(kind, when, key)] += 1
            print(f"{turn.id:>4} {when:<10} {kind:<15} kept={verdict.kept!s:<5} gain={gain:+.2f} "
                  f"echo={verdict.echo:.2f} copied={verdict.copied:.2f} {text[:80]!r}", file=sys.stderr)
    keys = ("met", "on topic", "kept", "kept and met", "kept, off topic")
    print("| hint | turn | rollouts | meet the rule (on topic) | on topic | kept by the screen | kept, meet the rule "
          "| kept, off topic |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in ("states the rule", "other complaint"):
        for when in ("first turn", "redo turn"):
            n = counts[(kind, when, "n")]
            if n:
                print(f"| {kind} | {when} | {n} | " + " | ".join(str(counts[(kind, when, k)]) for k in keys) + " |")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("db", type=Path)
    p.add_argument("--user", default="bottomline")
    a = p.parse_args()
    main(a.db, a.user)
