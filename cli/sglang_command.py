"""`learnproxy sglang-command`: print the SGLang launch command that matches these settings.

Adapters are loaded at runtime under new names, so LoRA must be enabled at start with the largest
rank and every target module a future version may use. The proxy renders chat templates itself and
sends token ids, so SGLang must use the same tokenizer as the proxy.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any
from urllib.parse import urlparse

from core.settings import Settings

ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def launch_command(settings: Settings, *, model_path: str, rank: int = 16,
                   target_modules: tuple[str, ...] = ALL_LINEAR, max_loras_per_batch: int | None = None,
                   python: str = "python") -> list[str]:
    """The argv for `sglang.launch_server`, its environment included, as a list of words."""
    url = urlparse(settings.sglang_url)
    per_batch = max_loras_per_batch or settings.keep_adapters + 1
    return [
        # logprobs at temperature 1 (unscaled), which is what the learner's importance ratio needs
        "SGLANG_RETURN_ORIGINAL_LOGPROB=1",
        python, "-m", "sglang.launch_server",
        "--model-path", model_path,
        "--tokenizer-path", model_path,
        "--host", url.hostname or "127.0.0.1",
        "--port", str(url.port or 30000),
        "--context-length", "{context_length}",
        "--enable-lora",
        "--max-lora-rank", str(rank),
        "--lora-target-modules", *target_modules,
        # versions in flight plus those kept for rollback must fit, with one slot for the next
        "--max-loras-per-batch", str(per_batch),
        "--max-loaded-loras", str(max(per_batch, settings.keep_adapters + 2)),
    ]


def register(sub: Any) -> None:
    p = sub.add_parser("sglang-command", help="print the SGLang launch command for these settings")
    p.add_argument("--rank", type=int, default=16, help="largest LoRA rank a version may use")
    p.add_argument("--target-modules", nargs="+", default=list(ALL_LINEAR))
    p.add_argument("--context-length", type=int, default=None, help="default: the model's own")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from core.modelload import resolve_model_path

    model_path = resolve_model_path(settings.model, settings.models_dir)
    words = launch_command(settings, model_path=model_path, rank=args.rank,
                           target_modules=tuple(args.target_modules))
    if args.context_length is None:
        at = words.index("--context-length")
        del words[at : at + 2]
    else:
        words[words.index("{context_length}")] = str(args.context_length)
    env, argv = words[0], words[1:]
    print(env + " " + shlex.join(argv))
    print()
    print(f"# tokenizer the proxy shares with SGLang: {model_path}")
    print(f"# then serve with: LEARNPROXY_ENGINE=sglang LEARNPROXY_SGLANG_URL={settings.sglang_url} "
          "learnproxy serve")
    return 0
