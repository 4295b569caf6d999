"""Which teacher rollout to learn: the greedy one, or the sample the hint explains best?

    python scripts/rollout_pick.py [USER] [--n 4] [--temperature 0.8]   (default: bottomline)

Training prompts only (every second of the user's pool: 20), first turns, the base model as both
teacher and student (the learner's first batch), in-process on the CPU, 64 new tokens. For each
hint (the rule in words, then each of the user's correction phrasings, the hints learnproxy gets),
the hinted teacher writes one greedy reply and `--n` sampled ones per prompt. Each reply's gain is
its mean teacher-minus-student logprob per token (`learner.rollouts.gains`). Columns: how often
the rule is met (and the quality guard passes) by the greedy reply, by a random sample, and by the
sample with the highest gain among those the rollout screen keeps (`TrainConfig.rollout_pick =
"best"`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.learn.users import all_users  # noqa: E402


def main(user_name: str, n: int, temperature: float) -> None:
    import torch

    from bench.learn.quality import QualityGuard
    from core.modelload import eos_token_ids, load_model, load_tokenizer, resolve_model_path
    from core.settings import Settings
    from learner import rollouts
    from learner.config import TrainConfig
    from learner.samples import teacher_messages

    torch.set_num_threads(2)
    torch.manual_seed(0)
    settings = Settings()
    path = resolve_model_path(settings.model, settings.models_dir)
    tok, model = load_tokenizer(path), load_model(path, "cpu", "float32")
    eos = eos_token_ids(model, tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
    cfg, guard = TrainConfig(), QualityGuard()
    user = all_users()[user_name]
    check = user.check
    assert check is not None, "a user with a text rule"
    prompts = [p.text for p in user.train[::2]]
    corrections = [c for options in user.corrections.values() for c in options]

    def ids(messages: list[dict[str, str]]) -> list[int]:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(tok(text, add_special_tokens=False)["input_ids"])

    student = [ids([{"role": "user", "content": p}]) for p in prompts]

    def good(prompt: str, text: str) -> bool:
        return not check(prompt, text) and guard.check(prompt, text).passed

    print(f"{user.name}: {len(prompts)} training prompts, {n} samples at T={temperature} per prompt")
    print("| hint | greedy meets | a sample meets | best-gain sample meets | best-gain words |\n"
          "|---|---|---|---|---|")
    for label, hint in [("the rule in words", user.hint),
                        *[(f"correction {i + 1}", c) for i, c in enumerate(corrections)]]:
        started = time.monotonic()
        teacher = [ids(teacher_messages([{"role": "user", "content": p}], hint)) for p in prompts]
        greedy = rollouts.generate(model, teacher, [64] * len(teacher), eos_ids=eos, pad_id=pad,
                                   temperature=0, device="cpu")
        sampled = rollouts.generate(model, [t for t in teacher for _ in range(n)], [64] * (n * len(teacher)),
                                    eos_ids=eos, pad_id=pad, temperature=temperature, device="cpu")
        gains = rollouts.gains(
            rollouts.scored(model, [t for t in teacher for _ in range(n)], sampled, device="cpu",
                            chunk=cfg.logprob_chunk),
            rollouts.scored(model, [s for s in student for _ in range(n)], sampled, device="cpu",
                            chunk=cfg.logprob_chunk))
        greedy_met = sampled_met = best_met = best_words = 0
        for j, prompt in enumerate(prompts):
            greedy_met += good(prompt, tok.decode(greedy[j], skip_special_tokens=True))
            texts = [tok.decode(r, skip_special_tokens=True) for r in sampled[j * n:(j + 1) * n]]
            sampled_met += sum(good(prompt, t) for t in texts)
            verdicts = [rollouts.screen(t, hint=hint, earlier=[], gain=g, min_gain=cfg.rollout_min_gain,
                                        max_echo=cfg.rollout_max_echo, max_copy=cfg.rollout_max_copy)
                        for t, g in zip(texts, gains[j * n:(j + 1) * n], strict=True)]
            best = rollouts.pick_best(verdicts)
            if best is not None:
                best_met += good(prompt, texts[best])
                best_words += len(texts[best].split())
        k = len(prompts)
        print(f"| {label}: {hint} | {greedy_met / k:.2f} | {sampled_met / (n * k):.2f} | {best_met / k:.2f} | "
              f"{best_words / k:.0f} |  <!-- {time.monotonic() - started:.0f} s -->", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("user", nargs="?", default="bottomline")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--temperature", type=float, default=0.8)
    a = p.parse_args()
    main(a.user, a.n, a.temperature)
