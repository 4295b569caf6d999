"""Does the hinted teacher reward saying the hint's phrase again? Token OPD advantages, no training.

    python scripts/opd_copy_bias.py    (base SmolLM2-135M, CPU, under a minute)

The token OPD advantage of a reply token is the teacher's logprob (the base weights with the hint
in context, as the learner builds it) minus the student's (here the base weights without it, as at
version 0). It prints, for one request and the advice user's hint, each reply's mean advantage and
the advantage of every token: a good reply that opens as asked, the same advice without the
opening, and two loops on the asked phrase like those the advice runs' students fell into. A loop
that scores above the good reply is what `TrainConfig.opd_no_repeat` takes back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.modelload import load_model, load_tokenizer, resolve_model_path  # noqa: E402
from core.settings import Settings  # noqa: E402
from learner import rollouts  # noqa: E402
from learner.losses import repeats  # noqa: E402
from learner.samples import _prompt_ids, teacher_messages  # noqa: E402

REQUEST = "My friend got promoted. How should I celebrate with her?"
HINT = "Begin your reply with 'My advice:' and then the advice."
REPLIES = {
    "opens as asked": "My advice: take her out to dinner at her favourite restaurant and raise a toast to her success.",
    "no opening": "You could take her out to dinner at her favourite restaurant and raise a toast to her success.",
    "loop on the phrase": 'My advice: "My advice: "My advice: "My advice: "My advice: "My advice:',
    "loop on a list item": "My advice:\n\n* Take her out:\n* Take her out:\n* Take her out:\n* Take her out:",
}


def main() -> None:
    settings = Settings()
    path = resolve_model_path(settings.model, settings.models_dir)
    tokenizer, model = load_tokenizer(path), load_model(path, device="cpu", dtype="float32").eval()
    messages = [{"role": "user", "content": REQUEST}]
    student_prompt = _prompt_ids(tokenizer, messages, None)
    teacher_prompt = _prompt_ids(tokenizer, teacher_messages(messages, HINT), None)

    replies = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in REPLIES.values()]
    with torch.no_grad():
        teacher, student = (rollouts.scored(model, [prompt] * len(replies), replies, device="cpu", chunk=1024)
                            for prompt in (teacher_prompt, student_prompt))

    print(f"request: {REQUEST!r}\nhint: {HINT!r}\n")
    for name, reply, t, s in zip(REPLIES, replies, teacher, student, strict=True):
        adv = t - s
        again = repeats(reply, 3)
        rest = f", inside a repeated trigram {adv[again].mean():+.2f}" if again.any() else ""
        print(f"{name}: mean advantage {adv.mean():+.2f}{rest}")
        print("  " + " ".join(f"{tokenizer.decode([t])!r}:{a:+.1f}" for t, a in zip(reply, adv.tolist(), strict=True)))


if __name__ == "__main__":
    main()
