"""The embedded engine: transformers + peft in this process, with continuous batching and LoRA per row.

One engine thread owns the model. It runs a step loop:

1. run queued commands (adapter load/unload), so no forward ever races a weight change;
2. drop rows whose client went away;
3. admit waiting requests while there is room: prefill each alone, sample its first token, then merge
   its KV cache rows into the running batch (left padding, a 2-D attention mask, explicit per-row
   position ids);
4. decode one token for every active row in ONE forward (peft's `adapter_names` picks each row's
   LoRA, "__base__" for none), sample per row, stream, and drop finished rows.

Tokens reach asyncio through `loop.call_soon_threadsafe` into a per-request `asyncio.Queue`.

Logprobs: each token's logprob is `log_softmax` of the UNSCALED logits (temperature 1, before top-p)
at the sampled id. That is pi_behavior as the learner's importance ratio needs it, whatever
temperature the client asked for.

Greedy (temperature 0) replies are reproducible for the same batch, not across batches: a row
decoded beside others (wider, left-padded tensors) rounds differently from the same row decoded
alone, and the differences flip near-tied tokens (12 held-out prompts, 8 at a time against one at a
time: 8 of 12 replies differed, while repeated runs of either way matched themselves).

Only full-attention decoder models are supported (Llama, Qwen2/3, Mistral without sliding window):
the KV merge edits `DynamicLayer` key/value tensors of shape [batch, heads, seq, head_dim] in place.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import random
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from core.modelload import eos_token_ids, load_model, load_tokenizer, pick_device
from proxy.engines.base import (
    AdapterError,
    ContextLengthExceeded,
    EngineError,
    EngineInfo,
    EngineUnavailable,
    GenerateRequest,
    StepOutput,
)

log = logging.getLogger(__name__)

BASE = "__base__"  # peft's name for "no adapter" in a mixed batch
_IDLE_WAIT_S = 0.05


@dataclass
class _Row:
    """One request, waiting or decoding."""

    request: GenerateRequest
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[StepOutput | BaseException]
    enqueued_at: float
    generator: torch.Generator | None = None
    length: int = 0  # real tokens in this row's KV cache
    last_token: int = 0
    generated: int = 0
    cancelled: bool = False  # set from the event loop; a plain bool write is atomic under the GIL
    token_times: list[float] = field(default_factory=list)

    @property
    def adapter_key(self) -> str:
        return self.request.adapter or BASE

    def emit(self, item: StepOutput | BaseException) -> None:
        try:
            self.loop.call_soon_threadsafe(self.out.put_nowait, item)
        except RuntimeError:  # the client's loop is closed: nobody is listening any more
            self.cancelled = True


@dataclass
class _Command:
    kind: str  # load, unload
    name: str
    path: str | None
    future: concurrent.futures.Future[None]


class _Batch:
    """The running batch: rows, their KV cache and attention mask, kept aligned by index."""

    def __init__(self) -> None:
        self.rows: list[_Row] = []
        self.cache: Any = None  # transformers DynamicCache
        self.mask: torch.Tensor | None = None  # [B, T], 0 marks left padding

    def add(self, row: _Row, cache: Any) -> None:
        new_len = cache.layers[0].keys.shape[-2]
        device = cache.layers[0].keys.device
        new_mask = torch.ones((1, new_len), dtype=torch.long, device=device)
        if not self.rows:
            self.rows, self.cache, self.mask = [row], cache, new_mask
            return
        assert self.mask is not None
        cur_len = self.mask.shape[1]
        width = max(cur_len, new_len)
        self.mask = torch.cat([_pad_left(self.mask, width), _pad_left(new_mask, width)], dim=0)
        for mine, theirs in zip(self.cache.layers, cache.layers, strict=True):
            mine.keys = torch.cat([_pad_left(mine.keys, width, dim=2), _pad_left(theirs.keys, width, dim=2)])
            mine.values = torch.cat(
                [_pad_left(mine.values, width, dim=2), _pad_left(theirs.values, width, dim=2)]
            )
        self.rows.append(row)

    def keep(self, keep: list[int]) -> None:
        """Keep only these row indices, then trim columns that are padding in every row."""
        if len(keep) == len(self.rows):
            return
        if not keep:
            self.rows, self.cache, self.mask = [], None, None
            return
        assert self.mask is not None
        index = torch.tensor(keep, device=self.mask.device)
        self.mask = self.mask.index_select(0, index)
        first = int(self.mask.sum(0).nonzero()[0].item())
        self.mask = self.mask[:, first:]
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, index)[:, :, first:, :]
            layer.values = layer.values.index_select(0, index)[:, :, first:, :]
        self.rows = [self.rows[i] for i in keep]


def _pad_left(tensor: torch.Tensor, width: int, dim: int = 1) -> torch.Tensor:
    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def sample_token(logits: torch.Tensor, temperature: float, top_p: float,
                 generator: torch.Generator | None) -> tuple[int, float]:
    """Sample one id from 1-D logits; return it with its logprob under the unscaled logits."""
    logits = logits.float()
    logprobs = torch.log_softmax(logits, dim=-1)
    if temperature <= 0.0:
        token = int(torch.argmax(logits).item())
        return token, float(logprobs[token].item())
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        # keep the smallest prefix whose mass reaches top_p (always at least the top token)
        drop = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    token = int(torch.multinomial(probs, 1, generator=generator).item())
    return token, float(logprobs[token].item())


class EmbeddedEngine:
    """transformers + peft in-process, continuously batched; see the module docstring."""

    def __init__(self, model_path: str, *, device: str, dtype: str, max_batch_size: int,
                 max_queue: int = 256) -> None:
        from transformers import AutoConfig

        self.model_path = model_path
        self.device = pick_device(device)
        self.dtype = dtype
        self.max_batch_size = max_batch_size
        config = AutoConfig.from_pretrained(model_path, local_files_only=Path(model_path).exists())
        self.info = EngineInfo(
            name="embedded", context_length=int(getattr(config, "max_position_embeddings", 8192) or 8192)
        )
        self._pending: queue.Queue[_Row] = queue.Queue(maxsize=max_queue)
        self._commands: queue.Queue[_Command] = queue.Queue()
        self._wake = threading.Event()
        self._running = False
        self._thread: threading.Thread | None = None
        self._model: Any = None
        self._peft = False
        self._adapters: dict[str, str] = {}
        self._batch = _Batch()
        self.steps = 0  # decode forwards run, for tests and benchmarks
        self.max_rows_seen = 0

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        if self._running:
            return
        self._model = await asyncio.to_thread(load_model, self.model_path, self.device, self.dtype)
        tokenizer = await asyncio.to_thread(load_tokenizer, self.model_path)
        self.info.eos_token_ids = eos_token_ids(self._model, tokenizer)
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="embedded-engine", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._running = False
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 30.0)
            self._thread = None
        self._fail_all(EngineUnavailable("the engine stopped"))

    async def health(self) -> bool:
        return self._running and self._thread is not None and self._thread.is_alive()

    def stats(self) -> dict[str, int]:
        """Rows decoding now and requests waiting for a slot."""
        return {"active": len(self._batch.rows), "queued": self._pending.qsize()}

    # --- requests ------------------------------------------------------------------------------
    def generate(self, request: GenerateRequest) -> AsyncIterator[StepOutput]:
        """Stream the request's tokens. Checks run now, so a bad request raises before any token."""
        if not self._running:
            raise EngineUnavailable("the embedded engine is not running")
        limit = self.info.context_length - request.params.max_new_tokens
        if len(request.input_ids) > limit or not request.input_ids:
            raise ContextLengthExceeded(len(request.input_ids), request.params.max_new_tokens,
                                        self.info.context_length)
        if request.adapter is not None and request.adapter not in self._adapters:
            raise AdapterError(f"adapter {request.adapter!r} is not loaded")
        if self._pending.full():
            raise EngineUnavailable("the embedded engine's queue is full", retry_after_s=1.0)
        return self._stream(request)

    async def _stream(self, request: GenerateRequest) -> AsyncIterator[StepOutput]:
        loop = asyncio.get_running_loop()
        row = _Row(request=request, loop=loop, out=asyncio.Queue(), enqueued_at=time.perf_counter())
        try:
            self._pending.put_nowait(row)
        except queue.Full:
            raise EngineUnavailable("the embedded engine's queue is full", retry_after_s=1.0) from None
        self._wake.set()
        try:
            while True:
                item = await row.out.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish_reason is not None:
                    return
        finally:
            row.cancelled = True  # client gone or done: the engine thread drops the row next step
            self._wake.set()

    # --- adapters ------------------------------------------------------------------------------
    async def load_adapter(self, name: str, path: str) -> None:
        await self._command("load", name, path)

    async def unload_adapter(self, name: str) -> None:
        await self._command("unload", name, None)

    def loaded_adapters(self) -> set[str]:
        return set(self._adapters)

    async def _command(self, kind: str, name: str, path: str | None) -> None:
        if not self._running:
            raise EngineUnavailable("the embedded engine is not running")
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._commands.put(_Command(kind, name, path, future))
        self._wake.set()
        await asyncio.wrap_future(future)

    def _run_command(self, command: _Command) -> None:
        try:
            if command.kind == "load":
                assert command.path is not None
                self._load(command.name, command.path)
            else:
                self._unload(command.name)
        except AdapterError as exc:
            command.future.set_exception(exc)
        except Exception as exc:  # a bad folder or config: report it, keep serving
            log.exception("adapter %s %s failed", command.kind, command.name)
            command.future.set_exception(AdapterError(f"{command.kind} {command.name!r} failed: {exc}"))
        else:
            command.future.set_result(None)

    def _load(self, name: str, path: str) -> None:
        if name in self._adapters or name == BASE:
            raise AdapterError(f"adapter {name!r} is already loaded; versions need new names")
        if not Path(path).exists():
            raise AdapterError(f"adapter folder {path} does not exist")
        if not self._peft:
            from peft import PeftModel

            self._model = PeftModel.from_pretrained(self._model, path, adapter_name=name, is_trainable=False)
            self._peft = True
        else:
            self._model.load_adapter(path, adapter_name=name, is_trainable=False)
        self._model.eval()
        self._adapters[name] = path

    def _unload(self, name: str) -> None:
        if name not in self._adapters:
            raise AdapterError(f"adapter {name!r} is not loaded")
        busy = [r for r in self._batch.rows if r.adapter_key == name and not r.cancelled]
        if busy:
            raise AdapterError(f"adapter {name!r} still serves {len(busy)} request(s)")
        self._model.delete_adapter(name)
        del self._adapters[name]

    # --- the engine thread ---------------------------------------------------------------------
    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while self._running:
            try:
                self._step()
            except Exception as exc:  # keep the engine alive; the rows in flight get the error
                log.exception("embedded engine step failed")
                self._fail_batch(EngineError(f"engine step failed: {type(exc).__name__}"))

    def _step(self) -> None:
        while not self._commands.empty():
            self._run_command(self._commands.get_nowait())
        self._drop([i for i, r in enumerate(self._batch.rows) if r.cancelled])
        admitted = self._admit()
        if self._batch.rows:
            self._decode()
        elif not admitted:
            self._wake.wait(_IDLE_WAIT_S)
            self._wake.clear()

    def _admit(self) -> bool:
        admitted = False
        while len(self._batch.rows) < self.max_batch_size:
            try:
                row = self._pending.get_nowait()
            except queue.Empty:
                break
            if row.cancelled:
                continue
            admitted = True
            try:
                cache = self._prefill(row)
            except Exception as exc:  # out of the queue and not batched: it must hear, or its client waits
                log.exception("embedded engine prefill failed")
                row.emit(EngineError(f"prefill failed: {type(exc).__name__}"))
                continue
            if cache is not None:
                try:
                    self._batch.add(row, cache)
                except Exception:  # a broken KV merge: the loop fails the whole batch
                    if not any(r is row for r in self._batch.rows):  # `add` appends the row last
                        row.emit(EngineError("engine step failed while batching"))
                    raise
        self.max_rows_seen = max(self.max_rows_seen, len(self._batch.rows))
        return admitted

    def _prefill(self, row: _Row) -> Any:
        """Run the prompt and emit the first token; the row's KV cache if it goes on decoding, else None."""
        request = row.request
        if request.adapter is not None and request.adapter not in self._adapters:
            row.emit(AdapterError(f"adapter {request.adapter!r} is not loaded"))
            return None
        seed = request.params.seed if request.params.seed is not None else random.getrandbits(63)
        row.generator = torch.Generator(device=self.device).manual_seed(seed)
        queue_ms = (time.perf_counter() - row.enqueued_at) * 1000.0
        ids = torch.tensor([request.input_ids], device=self.device)
        out = self._forward(ids, None, None, None, [row.adapter_key])
        row.length = len(request.input_ids)
        finished = self._sample_and_emit(row, out.logits[0, -1], queue_ms)
        return None if finished else out.cache

    def _decode(self) -> None:
        batch = self._batch
        assert batch.mask is not None
        device = batch.mask.device
        ids = torch.tensor([[r.last_token] for r in batch.rows], device=device)
        positions = torch.tensor([[r.length] for r in batch.rows], device=device)
        mask = torch.cat([batch.mask, torch.ones((len(batch.rows), 1), dtype=torch.long, device=device)], 1)
        out = self._forward(ids, mask, positions, batch.cache, [r.adapter_key for r in batch.rows])
        batch.mask = mask
        self.steps += 1
        done = []
        for i, row in enumerate(batch.rows):
            row.length += 1
            if self._sample_and_emit(row, out.logits[i, -1], None):
                done.append(i)
        self._drop(done)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor | None,
                 cache: Any, adapters: list[str]) -> Any:
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "use_cache": True,
                                  "logits_to_keep": 1}
        if positions is not None:
            kwargs["position_ids"] = positions
        if cache is not None:
            kwargs["cache"] = cache
        if self._peft:  # without adapter_names peft would apply its "active" adapter to every row
            kwargs["adapter_names"] = adapters
        return self._model(**kwargs)

    def _sample_and_emit(self, row: _Row, logits: torch.Tensor, queue_ms: float | None) -> bool:
        params = row.request.params
        token, logprob = sample_token(logits, params.temperature, params.top_p, row.generator)
        row.last_token = token
        row.generated += 1
        row.token_times.append(time.perf_counter())
        finish: str | None = None
        if token in self.info.eos_token_ids or token in params.stop_token_ids:
            finish = "stop"
        elif row.generated >= params.max_new_tokens or row.length + 1 >= self.info.context_length:
            finish = "length"
        row.emit(StepOutput(token_ids=[token], logprobs=[logprob], finish_reason=finish, queue_ms=queue_ms))
        return finish is not None

    def _drop(self, indices: list[int]) -> None:
        if indices:
            gone = set(indices)
            self._batch.keep([i for i in range(len(self._batch.rows)) if i not in gone])

    def _fail_batch(self, exc: BaseException) -> None:
        for row in self._batch.rows:
            row.emit(exc)
        self._batch = _Batch()

    def _fail_all(self, exc: BaseException) -> None:
        self._fail_batch(exc)
        while True:
            try:
                self._pending.get_nowait().emit(exc)
            except queue.Empty:
                break
        while not self._commands.empty():
            self._commands.get_nowait().future.set_exception(exc)
