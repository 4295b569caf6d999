"""Screen what the hinted teacher writes when its hint is a user's correction: the hint's wording,
whether a retry request rides along, and where the hint is put.

    python scripts/screen_hints.py [USER] [--framing F] [--standing]   (default: bottomline, every
                                                          framing; about 35 s a row on 2 cores)

Training prompts only (every second of the user's pool: 20), greedy, 64 new tokens, in-process on
the CPU. Rows: the user's rule in words (the ceiling); each of the user's correction phrasings, the
hint learnproxy gets from a correcting reply; the same with one of the simulator's retry requests
after it ("Try again."), which judges/retry.py now leaves out; and (suffix framing) the correction's
instruction sentences alone, what judges/instructions.py keeps of it; with `--standing`, each of the
simulator's off-topic complaints alone and with the user's first instruction standing before it, as
the learner shows them with `standing_instructions` on (learner/standing.py). Framings: `suffix` is the learner's
(learner.samples.teacher_messages, OpenClaw-RL's); `system` and `prefix` are the alternatives tried
here. Columns: how often the teacher meets the rule, how often it meets it on a reply that also
passes the benchmark's quality guard (what the held-out metric counts), how often it apologises,
how often it loops (repeated word trigrams over the learner's
rollout_max_repeat), its mean length. `--no-repeat N` writes as rollouts with `rollout_no_repeat` N do.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.learn.quality import QualityGuard  # noqa: E402
from bench.learn.users import CORRECTIONS, REDO, all_users  # noqa: E402
from judges.instructions import instructions  # noqa: E402
from learner.config import TrainConfig  # noqa: E402
from learner.rollouts import NoRepeatInReply, repeated  # noqa: E402
from learner.samples import teacher_messages  # noqa: E402
from learner.standing import with_standing  # noqa: E402

LOOP = TrainConfig().rollout_max_repeat  # the learner's loop limit (repeated word trigrams)
APOLOGY = re.compile(r"\b(sorry|apologi[sz]e|apologies|my mistake)\b", re.I)
Chat = list[dict[str, Any]]


def system(prompt: str, hint: str) -> Chat:
    note = (f"Feedback on an earlier reply to this request: {hint}\n"
            "Follow it from the first word of your reply. Do not apologise and do not mention the feedback.")
    return [{"role": "system", "content": note}, {"role": "user", "content": prompt}]


FRAMINGS: dict[str, Callable[[str, str], Chat]] = {
    "suffix": lambda prompt, hint: teacher_messages([{"role": "user", "content": prompt}], hint),
    "system": system,
    "prefix": lambda prompt, hint: [{"role": "user", "content": f"[before you answer: {hint}]\n\n{prompt}"}],
}


def main(user_name: str, framings: list[str], standing: bool = False, no_repeat: int = 0,
         corrections_only: bool = False) -> None:
    import torch
    from transformers import LogitsProcessorList

    from core.modelload import load_model, load_tokenizer, resolve_model_path
    from core.settings import Settings

    torch.set_num_threads(2)
    settings = Settings()
    path = resolve_model_path(settings.model, settings.models_dir)
    tok, model = load_tokenizer(path), load_model(path, "cpu", "float32")
    tok.padding_side = "left"
    user = all_users()[user_name]
    check = user.check
    assert check is not None, "a user with a text rule"
    prompts = [p.text for p in user.train[::2]]
    guard = QualityGuard()
    corrections = [c for options in user.corrections.values() for c in options]

    def generate(chats: list[Chat]) -> list[str]:
        out: list[str] = []
        for i in range(0, len(chats), 10):
            texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats[i:i + 10]]
            enc = tok(texts, return_tensors="pt", padding=True)
            extra: dict[str, Any] = {}
            if no_repeat:
                extra["logits_processor"] = LogitsProcessorList(
                    [NoRepeatInReply(no_repeat, start=enc["input_ids"].shape[1])])
            with torch.no_grad():
                ids = model.generate(**enc, max_new_tokens=64, do_sample=False, **extra)
            out += tok.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return out

    def row(framing: str, hint: str, label: str) -> None:
        started = time.monotonic()
        replies = generate([FRAMINGS[framing](p, hint) for p in prompts])
        met = sum(not check(q, r) for q, r in zip(prompts, replies, strict=True)) / len(replies)
        passed = [g.passed for g in guard.check_many(list(zip(prompts, replies, strict=True)))]
        met_guarded = sum(p and not check(q, r)
                          for p, q, r in zip(passed, prompts, replies, strict=True)) / len(replies)
        sorry = sum(bool(APOLOGY.search(r)) for r in replies) / len(replies)
        loops = sum(repeated(r) > LOOP for r in replies) / len(replies)
        words = sum(len(r.split()) for r in replies) / len(replies)
        print(f"| {framing} | {label} | {met:.2f} | {met_guarded:.2f} | {sorry:.2f} | {loops:.2f} | {words:.0f} |"
              f"  <!-- {time.monotonic() - started:.0f} s -->", flush=True)

    base = generate([[{"role": "user", "content": p}] for p in prompts])
    print(f"{user.name}: {len(prompts)} training prompts; rule met by the base: "
          f"{sum(not check(q, r) for q, r in zip(prompts, base, strict=True)) / len(base):.2f}")
    print("| framing | hint | rule met | rule met, guard passed | apologises | loops | words |\n"
          "|---|---|---|---|---|---|---|")
    for framing in framings:
        row(framing, user.hint, f"the rule in words: {user.hint}")
        for i, correction in enumerate(corrections):
            row(framing, correction, f"correction {i + 1}: {correction}")
            if framing == "suffix" and not corrections_only:
                retry = f"{correction} {REDO[i % len(REDO)]}"
                row(framing, retry, f"correction {i + 1} + retry request: {retry}")
                said = instructions(correction)
                if said != correction:
                    row(framing, said, f"correction {i + 1}, its instructions alone: {said}")
        if framing == "suffix" and standing:
            # an off-topic complaint, alone and after the user's first correction as a standing instruction
            # (learner/standing.py), as the learner shows them with `standing_instructions` on
            rule = instructions(corrections[0])
            for complaint in CORRECTIONS["irrelevant"]:
                said = instructions(complaint)
                row(framing, said, f"complaint: {said}")
                row(framing, with_standing(said, [rule]), f"standing: {rule} / complaint: {said}")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("user", nargs="?", default="bottomline")
    parser.add_argument("--framing", choices=list(FRAMINGS), action="append",
                        help="only this framing (repeatable); default: all")
    parser.add_argument("--standing", action="store_true",
                        help="also the off-topic complaints with the user's first instruction standing before them")
    parser.add_argument("--no-repeat", type=int, default=0,
                        help="write with no token n-gram of this length repeated in the reply (the learner's "
                             "rollout_no_repeat); 0: off")
    parser.add_argument("--corrections-only", action="store_true",
                        help="the rule and the corrections, without the retry and instruction-only rows")
    args = parser.parse_args()
    main(args.user, args.framing or list(FRAMINGS), args.standing, args.no_repeat, args.corrections_only)
