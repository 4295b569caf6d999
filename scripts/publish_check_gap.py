"""How far below the base model's reply does a good answer in the asked form fall in relevance?

    python scripts/publish_check_gap.py [--users advice,bottomline] [--n 12]    (CPU, about two minutes)

`TrainConfig.publish_check_drop` says a reply is off the request when its all-MiniLM-L6-v2 relevance
to the request falls more than the drop below the base model's greedy reply. A learned reply in the
form a user asked for ("My advice: ...", "In short, ...") is shorter and differently worded, so the
drop must leave room for it. This writes, for the first `--n` training requests of each benchmark
user (never the held-out pool), the base model's greedy 64-token reply with and without the user's
hint in its context (the teacher's form, as the learner builds it), and prints each pair's relevance,
the gap, and the hinted reply's loop share (`rollouts.repeated`; over 0.2 the check calls it a loop).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.learn.users import all_users  # noqa: E402
from core.embeddings import SentenceEmbedder  # noqa: E402
from core.modelload import eos_token_ids, load_model, load_tokenizer, resolve_model_path  # noqa: E402
from core.settings import Settings  # noqa: E402
from learner import rollouts  # noqa: E402
from learner.samples import _prompt_ids, teacher_messages  # noqa: E402


def main(user_names: list[str], n: int) -> None:
    settings = Settings()
    path = resolve_model_path(settings.model, settings.models_dir)
    tokenizer, model = load_tokenizer(path), load_model(path, device="cpu", dtype="float32").eval()
    embedder, eos = SentenceEmbedder(), eos_token_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    clean_gaps = []
    print("| user | gap | base relevance | hinted relevance | hinted loop share | hinted reply |")
    print("|---|---|---|---|---|---|")
    for name in user_names:
        user = all_users()[name]
        requests = [p.text for p in user.train[:n]]
        asked = [[{"role": "user", "content": q}] for q in requests]
        replies = {}
        for form, conversations in (("base", asked), ("hinted", [teacher_messages(m, user.hint) for m in asked])):
            prompts = [_prompt_ids(tokenizer, m, None) for m in conversations]
            ids = rollouts.generate(model, prompts, [64] * len(prompts), eos_ids=eos, pad_id=pad,
                                    temperature=0.0, device="cpu")
            texts = [tokenizer.decode([t for t in reply if t not in eos]).strip() for reply in ids]
            replies[form] = (texts, rollouts.relevance(embedder, texts, requests))
        for k in range(len(requests)):
            base, hinted = replies["base"][1][k], replies["hinted"][1][k]
            assert base is not None and hinted is not None
            text, loop = replies["hinted"][0][k], rollouts.repeated(replies["hinted"][0][k])
            if loop <= 0.2:
                clean_gaps.append(base - hinted)
            print(f"| {name} | {base - hinted:+.2f} | {base:.2f} | {hinted:.2f} | {loop:.2f} | {text[:70]!r} |")
    if clean_gaps:
        print(f"\nhinted replies that do not loop: {len(clean_gaps)}; largest gap {max(clean_gaps):+.2f}; "
              f"over 0.25: {sum(g > 0.25 for g in clean_gaps)}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", default="advice,bottomline")
    p.add_argument("--n", type=int, default=12)
    a = p.parse_args()
    main(a.users.split(","), a.n)
