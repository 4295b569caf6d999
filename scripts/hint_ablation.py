"""Does the learner move a rule when the hint is good? The learner's own batches, in-process, with
the hint either the user's rule in words or one of the user's corrections (what learnproxy gets).

    python scripts/hint_ablation.py [--user U] [--versions N] [--arms rule,correction] [--train-config JSON]
    (defaults: bottomline, 5, both arms, the benchmark's forward top-K; about 9 min an arm on 2 cores)

Not the learning benchmark (no proxy, no judge, no sessions): first turns only. Per version, 8
training prompts in pool order, one reply each sampled from the current adapter (temperature 0.2,
64 tokens) with its sampling logprobs taken as the embedded engine logs them (log-softmax of the
unscaled logits), score +1 if the reply meets the rule else -1, and the arm's hint; one
`Learner.train_batch` (2 optimiser steps, combined method; by default forward top-K as in the
benchmark's bottomline runs, or the TrainConfig overrides given). After each version, greedy
replies to all of the user's held-out prompts: how many meet the rule, how many apologise.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.learn.users import User, all_users  # noqa: E402

FORWARD_TOPK = {"opd_mode": "topk", "topk_direction": "forward"}
APOLOGY = re.compile(r"\b(sorry|apologi[sz]e|apologies)\b", re.I)
BATCH = 8


def main(user_name: str, versions: int, arms: list[str], overrides: dict[str, Any]) -> None:
    import torch

    from core.modelload import resolve_model_path
    from core.settings import Settings

    torch.set_num_threads(2)
    user = all_users()[user_name]
    assert user.check is not None, "a user with a text rule"
    corrections = [c for options in user.corrections.values() for c in options]
    model_path = str(resolve_model_path(Settings().model, Settings().models_dir))
    print(f"{user.name}: {versions} versions of {BATCH} first turns; held-out n={len(user.heldout)}; "
          f"learner overrides {json.dumps(overrides)}")
    print("| hint | v0 | " + " | ".join(f"v{v}" for v in range(1, versions + 1)) + " |")
    print("|---|" + "---|" * (versions + 1))
    for arm in arms:
        cells = run_arm(arm, user, corrections, model_path, versions, overrides)
        print(f"| {arm} | " + " | ".join(cells) + " |", flush=True)


def run_arm(arm: str, user: User, corrections: list[str], model_path: str, versions: int,
            overrides: dict[str, Any]) -> list[str]:
    import torch

    from learner.config import TrainConfig
    from learner.samples import Sample
    from learner.trainer import Learner

    check = user.check
    assert check is not None
    torch.manual_seed(0)
    rng = random.Random(0)
    learner = Learner(model_path, TrainConfig(**{"device": "cpu", **overrides}))
    tok, model = learner.tokenizer, learner.model

    def prompt_ids(text: str) -> list[int]:
        rendered = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                           add_generation_prompt=True)
        return list(tok(rendered, add_special_tokens=False)["input_ids"])

    def reply(text: str, sample: bool) -> tuple[list[int], list[int], list[float]]:
        ids = prompt_ids(text)
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=sample,
                                 temperature=0.2 if sample else None, top_p=None, top_k=None,
                                 output_logits=True, return_dict_in_generate=True)
        response = out.sequences[0, len(ids):].tolist()
        steps = zip(out.logits, response, strict=True)
        return ids, response, [float(torch.log_softmax(step[0].float(), -1)[t]) for step, t in steps]

    def evaluate() -> str:
        texts = [tok.decode(reply(p.text, False)[1], skip_special_tokens=True) for p in user.heldout]
        met = sum(not check(p.text, t) for p, t in zip(user.heldout, texts, strict=True))
        sorry = sum(bool(APOLOGY.search(t)) for t in texts)
        print(f"    e.g. {texts[0][:100]!r}", file=sys.stderr, flush=True)
        return f"{met}/{len(texts)} met, {sorry} sorry"

    model.eval()
    cells = [evaluate()]
    pool = list(user.train)
    for version in range(versions):
        samples = []
        for i in range(BATCH):
            prompt = pool[(version * BATCH + i) % len(pool)].text
            ids, response, logprobs = reply(prompt, True)
            text = tok.decode(response, skip_special_tokens=True)
            hint = user.hint if arm == "rule" else rng.choice(corrections)
            samples.append(Sample(turn_id=i, prompt_ids=ids, response_ids=response, behavior_logprobs=logprobs,
                                  score=-1 if check(prompt, text) else 1, hint=hint,
                                  messages=[{"role": "user", "content": prompt}], max_new_tokens=64))
        learner.train_batch(samples)
        cells.append(evaluate())
        print(f"  {arm} v{version + 1}: {cells[-1]}", file=sys.stderr, flush=True)
    return cells

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--user", default="bottomline")
    p.add_argument("--versions", type=int, default=5)
    p.add_argument("--arms", default="rule,correction", help="rule (the rule in words), correction, or both")
    p.add_argument("--train-config", default=json.dumps(FORWARD_TOPK), help="TrainConfig overrides as JSON")
    a = p.parse_args()
    main(a.user, a.versions, a.arms.split(","), json.loads(a.train_config))
