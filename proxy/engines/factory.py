"""Build the serving engine named by `settings.engine`: embedded, sglang or null."""

from __future__ import annotations

from core.modelload import load_tokenizer, resolve_model_path
from core.settings import Settings
from proxy.engines.base import Engine

NULL_REPLY = "This is the null engine."


def _context_length(model_path: str) -> int:
    from pathlib import Path

    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path, local_files_only=Path(model_path).exists())
    return int(getattr(config, "max_position_embeddings", 8192) or 8192)


def build_engine(settings: Settings) -> Engine:
    """The engine for these settings, not yet started (call `await engine.start()`)."""
    model_path = resolve_model_path(settings.model, settings.models_dir)
    if settings.engine == "embedded":
        from proxy.engines.embedded import EmbeddedEngine

        return EmbeddedEngine(model_path, device=settings.device, dtype=settings.dtype,
                              max_batch_size=settings.max_batch_size)
    tokenizer = load_tokenizer(model_path)
    eos = tokenizer.eos_token_id
    if settings.engine == "null":
        from proxy.engines.null import NullEngine

        reply = list(tokenizer.encode(NULL_REPLY, add_special_tokens=False))
        return NullEngine(reply, context_length=_context_length(model_path), eos_id=eos)
    from proxy.engines.sglang import SGLangEngine

    return SGLangEngine(settings.sglang_url, timeout_s=settings.engine_timeout_s,
                        context_length=_context_length(model_path),
                        eos_token_ids=[eos] if isinstance(eos, int) else [])
