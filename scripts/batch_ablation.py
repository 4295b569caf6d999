"""Which training signal moved the student: a finished run's first batches retrained with parts switched off.

    python scripts/batch_ablation.py RUN_DIR [--user bottomline] [--batches 1] [--variants as_run,rl_only,...]
        [--opening "In short,"] [--every]
    (RUN_DIR: a run's folder left by `learnproxy bench learn --keep DIR`, holding learnproxy.db and the
    train_config.json the run's learner read)

For each variant it starts a fresh adapter (the learner's seed), trains it on the turns the run's
learner trained into versions 1..N, batch by batch, with the run's learner settings plus the variant's
overrides, then writes greedy replies (64 tokens, as the benchmark's evaluation) to the user's
training prompts that none of those batches asked, and grades them as the benchmark does: the quality
guard, then the user's rule. The held-out pool is left alone: this script compares learner settings,
and the benchmark must not be tuned on its own held-out prompts. It also counts replies that apologise
or speak of being a chatbot or an AI, the stock reply some runs fell into, and with `--opening` the
mean probability that a reply begins with that text: greedy decoding shows a rule only once its
opening is the likeliest, this shows it rising before that.

The judge's scores, hints and the logged sampling logprobs are the run's own. From the second batch
on, the run's turns were sampled by the run's adapter, not the variant's; the importance ratio is
then off-policy for every variant but `as_run`. The teacher rollouts are written afresh (greedy by
default, so `as_run` writes the run's own unless the weights differ).

With `--every` each variant is also graded after each earlier batch (`name@vN`; the last keeps the
variant's name), with the batch's mix of judge scores and hints beside it. Where a run's held-out
curve rose and then fell, comparing variants batch by batch shows which signal turned it, on the
training prompts the run never asked.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VARIANTS: dict[str, dict[str, Any]] = {
    "as_run": {},
    "no_token_opd": {"w_opd": 0.0},
    "opd_up_only": {"opd_floor": 0.0},
    "no_rollouts": {"rollouts": 0},
    "no_rl": {"w_rl": 0.0},
    "rl_only": {"w_opd": 0.0, "rollouts": 0},
    "token_opd_only": {"w_rl": 0.0, "rollouts": 0},
    "rollouts_only": {"w_rl": 0.0, "w_opd": 0.0},
    "topk_forward": {"opd_mode": "topk", "topk_direction": "forward"},
    "steps2": {"steps_per_batch": 2},
    "steps4": {"steps_per_batch": 4},
    "kl0.5": {"kl_coef": 0.5},
    "lr1e-4": {"lr": 1e-4},
    "steps6": {"steps_per_batch": 6},
    "steps8": {"steps_per_batch": 8},
    "lr6e-4": {"lr": 6e-4},
    "teacher_adapter": {"teacher": "adapter"},
    "w_rollout3": {"w_rollout": 3.0},
}
STOCK = re.compile(r"\b(sorry|apologi[sz]e|as an ai|as a chatbot|language model)\b", re.IGNORECASE)
MAX_TOKENS = 64


def unasked(user: Any, data: list[list[Any]]) -> list[str]:
    """The user's training prompts that no sample in `data` was asked in its conversation."""
    asked = "\n".join(m["content"] for batch in data for s in batch for m in s.messages
                      if m.get("role") == "user" and isinstance(m.get("content"), str))
    return [p.text for p in user.train if p.text not in asked]


def batches(db: Path, n: int, settings: Any, config: Any) -> list[list[Any]]:
    """The samples of versions 1..n, each batch in turn-id order, as the run's learner built them."""
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from core.models import Turn
    from learner.samples import to_sample

    out = []
    with Session(create_engine(f"sqlite:///file:{db}?mode=ro&uri=true")) as s:
        for version in range(1, n + 1):
            turns = s.scalars(select(Turn).where(Turn.trained_version_id == version).order_by(Turn.id))
            samples = [to_sample(s, settings, config, t) for t in turns]
            out.append([x for x in samples if x is not None])
    return out


def replies(learner: Any, prompts: list[str]) -> list[tuple[str, bool]]:
    """Greedy replies to single-turn prompts under the learner's adapter: (text, cut off at the limit)."""
    from core.modelload import eos_token_ids
    from learner import rollouts

    tok = learner.tokenizer
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
             for p in prompts]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    eos = eos_token_ids(learner.model, tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
    learner.model.eval()
    written = rollouts.generate(learner.model, [list(i) for i in ids], [MAX_TOKENS] * len(ids), eos_ids=eos,
                                pad_id=pad, temperature=0.0, device=learner.device)
    # generate cuts each reply after its end token; a reply without one ran to the limit
    return [(tok.decode(r, skip_special_tokens=True), not (r and r[-1] in eos)) for r in written]


def opening_probability(learner: Any, prompts: list[str], opening: str) -> float:
    """Mean over prompts of the probability that the greedy-evaluated student's reply begins with `opening`."""
    import torch

    from learner import rollouts

    tok = learner.tokenizer
    ids = [tok(tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True),
               add_special_tokens=False)["input_ids"] for p in prompts]
    head = tok(opening, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        scored = rollouts.scored(learner.model, ids, [head] * len(ids), device=learner.device,
                                 chunk=learner.config.logprob_chunk)
    return sum(float(s.sum().exp()) for s in scored) / len(scored)


def grade(user: Any, guard: Any, prompts: list[str], written: list[tuple[str, bool]]) -> dict[str, Any]:
    from bench.learn.sim import rule_codes

    rows = []
    for prompt, (text, cut) in zip(prompts, written, strict=True):
        passed = guard.check(prompt, text).passed
        rule = not rule_codes(user, prompt, text, truncated=cut)
        rows.append({"satisfied": passed and rule, "guard": passed, "rule": rule,
                     "stock": bool(STOCK.search(text)), "reply": text})
    n = len(rows)
    return {"n": n, **{k: sum(r[k] for r in rows) / n for k in ("satisfied", "guard", "rule", "stock")},
            "mean_words": sum(len(r["reply"].split()) for r in rows) / n, "replies": [r["reply"] for r in rows]}


def main(run_dir: Path, user_name: str, n_batches: int, names: list[str], out: Path | None, opening: str,
         every: bool) -> None:
    from bench.learn.quality import QualityGuard
    from bench.learn.users import all_users
    from core.modelload import resolve_model_path
    from core.settings import Settings
    from learner.config import TrainConfig
    from learner.trainer import Learner

    settings = Settings()
    run_cfg = run_dir / "train_config.json"
    overrides = json.loads(run_cfg.read_text()) if run_cfg.exists() else {}
    base = TrainConfig.from_json({**TrainConfig().to_json(), **overrides})
    user, guard = all_users()[user_name], QualityGuard()
    prompts = unasked(user, batches(run_dir / "learnproxy.db", n_batches, settings, base))
    print(f"run {run_dir.name}: overrides {overrides}; {len(prompts)} unasked training prompts", flush=True)
    model_path = resolve_model_path(settings.model, settings.models_dir)
    results: dict[str, Any] = {}
    for name in names:
        config = TrainConfig.from_json({**base.to_json(), **VARIANTS[name]})
        data = batches(run_dir / "learnproxy.db", n_batches, settings, config)  # samples depend on the config
        learner = Learner(model_path, config)
        if name == names[0]:
            _graded(results, "base", learner, user, guard, prompts, opening, None)
        for i, batch in enumerate(data, start=1):
            learner.train_batch(batch)
            if every and i < len(data):
                _graded(results, f"{name}@v{i}", learner, user, guard, prompts, opening, batch)
        # the last batch's grade keeps the variant's own name, with or without --every
        _graded(results, name, learner, user, guard, prompts, opening, data[-1] if every and data else None)
    if out:
        out.write_text(json.dumps({"run": str(run_dir), "user": user_name, "batches": n_batches,
                                   "overrides": overrides, "variants": {k: VARIANTS[k] for k in names},
                                   "results": results}, indent=1))


def _graded(results: dict[str, Any], key: str, learner: Any, user: Any, guard: Any, prompts: list[str],
            opening: str, batch: list[Any] | None) -> None:
    """Grade the learner as it is now into `results[key]`, with the mix of `batch` when given, and print its row."""
    results[key] = grade(user, guard, prompts, replies(learner, prompts))
    if batch is not None:
        results[key]["samples"] = _mix(batch)
    if opening:
        results[key]["opening"] = opening_probability(learner, prompts, opening)
    _row(key, results[key])


def _mix(batch: list[Any]) -> dict[str, int]:
    """What one batch held: samples scored +1 and -1 by the judge (or a label), and samples with a hint."""
    return {"plus": sum(s.score > 0 for s in batch), "minus": sum(s.score < 0 for s in batch),
            "hinted": sum(bool(s.hint) for s in batch), "n": len(batch)}


def _row(name: str, r: dict[str, Any]) -> None:
    first = r["replies"][0][:70].replace("\n", " ")
    opening = f"{r['opening']:.3f}" if "opening" in r else "-"
    mix = r.get("samples", {})
    held = f"{mix['n']} ({mix['plus']}+, {mix['minus']}-, {mix['hinted']} hinted)" if mix else "-"
    print(f"| {name} | {held} | {r['satisfied']:.2f} | {r['guard']:.2f} | {r['rule']:.2f} | {r['stock']:.2f} | "
          f"{opening} | {r['mean_words']:.0f} | {first!r} |", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--user", default="bottomline")
    p.add_argument("--batches", type=int, default=1)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--out", type=Path, help="write the replies and rates as JSON here")
    p.add_argument("--opening", default="", help="also report the mean probability of a reply beginning so")
    p.add_argument("--every", action="store_true", help="grade after every batch, not only the last (name@vN)")
    a = p.parse_args()
    chosen = a.variants.split(",")
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    print("| variant | batch held | satisfied | guard | rule | stock apology | P(opening) | words | first reply |\n"
          "|---|---|---|---|---|---|---|---|---|")
    main(a.run_dir, a.user, a.batches, chosen, a.out, a.opening, a.every)
