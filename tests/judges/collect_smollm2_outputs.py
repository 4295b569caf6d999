"""How `data/smollm2_raw.jsonl` was made: SmolLM2-135M-Instruct answering the real judge prompts.

Run by hand (`.venv/bin/python tests/judges/collect_smollm2_outputs.py MODEL_DIR`); not a test. It
appends samples; `expected_score`, `expected_hint` and `note` were then added to each row by reading it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from judges.prompts import JudgeInput, load_template, prompt_values

HERE = Path(__file__).resolve().parent
CASES = [
    JudgeInput("List the files in /tmp", "[tool call] exec({\"cmd\": \"ls /tmp\"})",
               [{"role": "tool", "content": "a.txt\nb.log"}, {"role": "user", "content": "thanks!"}]),
    JudgeInput("What is 17*3?", "17*3 = 41", [{"role": "user", "content": "no, that's wrong, it's 51"}]),
    JudgeInput("Read config.yml", "[tool call] read({\"path\": \"config.yml\"})",
               [{"role": "tool", "content": "{\"error\": \"ENOENT: no such file config.yml\"}"}]),
]


def main(model_path: str, samples: int = 1) -> None:
    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16).eval()
    torch.manual_seed(0)
    target = open(HERE / "data" / "smollm2_raw.jsonl", "a", encoding="utf-8")  # noqa: SIM115
    for case in CASES:
        for name in ("prm", "hint"):
            template = load_template(name)
            prompt = template.render(**prompt_values(case, 4000))
            text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                           add_generation_prompt=True)
            ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            for _ in range(samples):
                gen = model.generate(ids, do_sample=True, temperature=0.6, max_new_tokens=80)
                raw = tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True)
                row = {"template": name, "request": case.request, "raw": raw}
                target.write(json.dumps(row, ensure_ascii=False) + "\n")
                target.flush()  # rows appear as they are sampled
    target.close()


if __name__ == "__main__":
    main(sys.argv[1])
