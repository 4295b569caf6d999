"""Small real LoRA adapters for tests, made with peft on the real base model.

`init_lora_weights=False` gives random A and B matrices, so an adapter really changes the outputs
(peft's default zero-initialises B, which would make every adapter a no-op).
"""

from __future__ import annotations

from pathlib import Path

import torch


def make_adapters(model_path: str, out_dir: Path, count: int, *, rank: int = 4,
                  target_modules: tuple[str, ...] = ("q_proj", "v_proj"), seed: int = 0) -> list[Path]:
    """Save `count` distinct LoRA adapters for `model_path` under `out_dir`; return their folders."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, local_files_only=True)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(target_modules),
                        init_lora_weights=False, task_type="CAUSAL_LM")
    names = [f"a{i}" for i in range(count)]
    torch.manual_seed(seed)
    model = get_peft_model(base, config, adapter_name=names[0])
    for name in names[1:]:
        model.add_adapter(name, config)  # each add draws fresh random weights
    paths = []
    for name in names:
        path = out_dir / name
        model.save_pretrained(str(path), selected_adapters=[name])
        # peft saves non-default adapters in a subfolder named after the adapter
        nested = path / name
        paths.append(nested if (nested / "adapter_config.json").exists() else path)
    return paths
