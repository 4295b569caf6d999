"""Screen candidate user rules for the learning benchmark: the base model's rate against its rate
with the rule as a hint in its prompt (the ceiling hint distillation can pass on).

    python scripts/screen_rules.py [--pool USER] [NAME ...]      (default: every candidate; about 30 s each on 2 cores)

Training prompts only (every fifth of student's and brief's pools: 15; with --pool, every other one of
that user's training pool), never held-out ones, greedy,
64 new tokens, in-process on the CPU. A rule worth a simulated user has a base rate near 0, a hinted
rate well above 0.5 (also among hinted replies that pass the benchmark's quality guard, what the
held-out metric counts), and no generic change (shorter replies, say) that meets it.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.learn import rules  # noqa: E402
from bench.learn.sim import with_hint  # noqa: E402


def opens(phrase: str, marks: str) -> Callable[[str], bool]:
    """An opening-phrase rule: `phrase` first, one of `marks`, then the answer itself."""
    pattern = re.compile(rf"\W*{phrase}\s*[{marks}]\s*\S", re.I)
    return lambda t: bool(pattern.match(t.strip()))


CANDIDATES: dict[str, tuple[Callable[[str], bool], str]] = {
    "ends_question": (lambda t: t.strip().endswith("?"), "End your reply with a short question back to me."),
    "for_example": (lambda t: bool(re.search(r"\bfor (example|instance)\b", t, re.I)),
                    "Give one concrete example, starting it with 'For example'."),
    "great_question": (lambda t: t.strip().lower().startswith("great question"),
                       "Start your reply with 'Great question!'"),
    "in_short": (lambda t: t.strip().lower().startswith("in short"), "Begin your reply with 'In short,'."),
    "numbered": (lambda t: len(re.findall(r"^\s*\d[.)]\s", t, re.M)) >= 2, "Answer as a numbered list of steps."),
    "honestly": (opens("honestly", ",:"), "Begin your reply with 'Honestly,' and then your answer."),
    "my_advice": (opens("my advice", ",:"), "Begin your reply with 'My advice:' and then the advice."),
    "quick_answer": (opens("quick answer", ",:"), "Begin your reply with 'Quick answer:' and then the answer."),
    "good_news": (opens("good news", ",:!"), "Begin your reply with 'Good news:' and then the answer."),
    "in_a_nutshell": (opens("in a nutshell", ","), "Begin your reply with 'In a nutshell,' and then the answer."),
    "simply_put": (opens("simply put", ","), "Begin your reply with 'Simply put,' and then the answer."),
    "short_answer": (opens("short answer", ":"), "Begin your reply with 'Short answer:' and then the answer."),
    "quick_tip": (opens("quick tip", ":"), "Begin your reply with 'Quick tip:' and then the tip."),
    "fun_fact": (opens("fun fact", ":"), "Begin your reply with 'Fun fact:' and then the answer."),
    "heres_the_thing": (opens("here's the thing", ":"),
                        "Begin your reply with 'Here's the thing:' and then the answer."),
    "basically": (opens("basically", ","), "Begin your reply with 'Basically,' and then the answer."),
    "first_things_first": (opens("first things first", ":,"),
                           "Begin your reply with 'First things first:' and then the first step."),
    "sure_thing": (opens("sure thing", "!,."), "Begin your reply with 'Sure thing!' and then the answer."),
    "great_idea": (opens("great idea", "!,."), "Begin your reply with 'Great idea!' and then the answer."),
    "of_course": (opens("of course", "!,."), "Begin your reply with 'Of course!' and then the answer."),
    "bold": (lambda t: "**" in t, "Put the key term in **bold**."),
    "analogy": (lambda t: bool(re.search(r"\b(imagine|think of it|it's like|is like)\b", t, re.I)),
                "Explain it with an everyday analogy, starting 'Imagine'."),
    "you": (lambda t: len(re.findall(r"\byou\b", t, re.I)) >= 2, "Talk to me directly, using 'you'."),
    "formal": (lambda t: "'" not in t and "!" not in t, "Write formally: no contractions, no exclamation marks."),
    "emoji": (lambda t: bool(re.search(r"[\U0001F300-\U0001FAFF]", t)), "Add a fitting emoji at the end."),
    "summary_line": (lambda t: bool(re.search(r"\b(in summary|to sum up|in short|tl;dr)\b", t, re.I)),
                     "Finish with a one-line summary starting 'In short,'."),
}


def training_prompts(pool: str | None = None) -> list[str]:
    prompts = []
    for name in (pool,) if pool else ("student", "brief"):
        for line in (ROOT / "bench/learn/data" / f"{name}.jsonl").read_text().splitlines():
            row = json.loads(line)
            if row["split"] == "train":
                prompts.append(row["prompt"])
    return prompts[::2] if pool else prompts[::5][:16]


def main(names: list[str], pool: str | None = None) -> None:
    import torch

    from bench.learn.quality import QualityGuard
    from core.modelload import load_model, load_tokenizer, resolve_model_path
    from core.settings import Settings

    torch.set_num_threads(2)
    settings = Settings()
    path = resolve_model_path(settings.model, settings.models_dir)
    tok, model = load_tokenizer(path), load_model(path, "cpu", "float32")
    tok.padding_side = "left"
    prompts = training_prompts(pool)
    guard = QualityGuard()

    def generate(texts: list[str]) -> list[str]:
        out: list[str] = []
        for i in range(0, len(texts), 8):
            chats = [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                             add_generation_prompt=True) for t in texts[i:i + 8]]
            enc = tok(chats, return_tensors="pt", padding=True)
            with torch.no_grad():
                ids = model.generate(**enc, max_new_tokens=64, do_sample=False)
            out += tok.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return out

    base = generate(prompts)
    print(f"{len(prompts)} training prompts; student rule met by the base: "
          f"{sum(not rules.check_student(x) for x in base) / len(base):.2f}")
    print("| rule | base | hinted | hinted, guard passed | hint |\n|---|---|---|---|---|")
    for name in names or list(CANDIDATES):
        check, hint = CANDIDATES[name]
        started = time.monotonic()
        hinted = generate([with_hint(p, hint) for p in prompts])
        met = [check(x) for x in hinted]
        passed = [g.passed for g in guard.check_many(list(zip(prompts, hinted, strict=True)))]
        kept = sum(ok and m for ok, m in zip(passed, met, strict=True)) / len(hinted)
        rate = sum(map(check, base)) / len(base), sum(met) / len(hinted)
        print(f"| {name} | {rate[0]:.2f} | {rate[1]:.2f} | {kept:.2f} | {hint} |"
              f"  <!-- {time.monotonic() - started:.0f} s -->")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="candidates to screen (default: all)")
    parser.add_argument("--pool", help="screen on this user's training prompts instead")
    args = parser.parse_args()
    main(args.names, args.pool)
