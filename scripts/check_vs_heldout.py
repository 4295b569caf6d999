"""Does the publish check's verdict on a version foretell that version's held-out replies?

    python scripts/check_vs_heldout.py RUN_DIR --user advice    (CPU, about a minute per version)
    (RUN_DIR: one run under `learnproxy bench learn --keep DIR`, e.g. DIR/combined-advice-s0)

A rejected version is never served, so the benchmark never evaluates it. Every version's adapter
files stay in the run's directory, though, with the check's verdict in the DB. This loads each
version (rejected ones too) onto the base model in-process, writes greedy 64-token replies to the
user's held-out prompts in the evaluation's chunks of 8, and grades them with the benchmark's rule
and quality guard (`bench.learn.sim.grade_reply`). The replies are HF `generate` batches, not the
embedded engine's, so a served version's figures here can differ from the run's own by a reply or
two (a greedy reply depends on what shares its batch: scripts/greedy_batching.py). Analysis only:
it reads the held-out pool, which nothing in training or the check may do.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.learn.quality import QualityGuard  # noqa: E402
from bench.learn.sim import eval_chunks, grade_reply  # noqa: E402
from bench.learn.users import all_users  # noqa: E402
from core.modelload import eos_token_ids, load_model, load_tokenizer, resolve_model_path  # noqa: E402
from core.settings import Settings  # noqa: E402
from learner import rollouts  # noqa: E402
from learner.samples import asking_prompt_ids  # noqa: E402

TOKENS = 64


def versions(run: Path) -> list[tuple[int, str, str, str]]:
    """(id, state, adapter path, the check's 'failed (base)') of each version with files, oldest first."""
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///file:{run / 'learnproxy.db'}?mode=ro&uri=true")
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, state, path, metrics FROM adapter_versions ORDER BY id")).all()
    out = []
    for vid, state, path, metrics in rows:
        if not path or not Path(path).exists():
            continue
        check = (json.loads(metrics) if metrics else {}).get("publish_check")
        verdict = f"{check['failed']}/{len(check['rows'])} ({check['base_failed']})" if check else "—"
        out.append((vid, state, path, verdict))
    return out


def main(run: Path, user_name: str) -> None:
    from peft import PeftModel

    user = all_users()[user_name]
    if user.tools:
        raise SystemExit(f"{user_name} is a tool user: this grades prose replies")
    settings = Settings()
    model_path = resolve_model_path(settings.model, settings.models_dir)
    tokenizer, base = load_tokenizer(model_path), load_model(model_path, device="cpu", dtype="float32").eval()
    eos, guard = eos_token_ids(base, tokenizer), QualityGuard()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]

    def grade(model: object) -> dict[str, float]:
        rows = []
        for chunk in eval_chunks(user.heldout):
            prompts = [asking_prompt_ids(tokenizer, [], None, p.text) for p in chunk]
            ids = rollouts.generate(model, prompts, [TOKENS] * len(prompts), eos_ids=eos, pad_id=pad,
                                    temperature=0.0, device="cpu")
            for p, reply in zip(chunk, ids, strict=True):
                cut = len(reply) >= TOKENS and not any(t in eos for t in reply)
                text = tokenizer.decode([t for t in reply if t not in eos]).strip()
                rows.append(grade_reply(user, guard, p.text, text, truncated=cut))
        n = len(rows)
        return {k: sum(r[k] for r in rows) / n for k in ("satisfied", "guard", "rule")}

    print(f"{run} · {user_name} · {len(user.heldout)} held-out prompts, {TOKENS} tokens, HF generate")
    print("| version | state | check failed (base) | held-out satisfied | guard | rule |")
    print("|---|---|---|---|---|---|")
    rates = grade(base)
    print(f"| base | — | — | {rates['satisfied']:.2f} | {rates['guard']:.2f} | {rates['rule']:.2f} |")
    peft_model = None
    for vid, state, path, verdict in versions(run):
        name = f"v{vid}"
        if peft_model is None:
            peft_model = PeftModel.from_pretrained(base, path, adapter_name=name).eval()
        else:
            peft_model.load_adapter(path, adapter_name=name)
        peft_model.set_adapter(name)
        rates = grade(peft_model)
        cells = " | ".join(f"{rates[k]:.2f}" for k in ("satisfied", "guard", "rule"))
        print(f"| {name} | {state} | {verdict} | {cells} |", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path)
    p.add_argument("--user", required=True)
    a = p.parse_args()
    main(a.run, a.user)
