"""A minimal OpenAI-compatible chat server over transformers `generate`, for the judge benchmark.

It stands in for learnproxy's embedded engine serving the base model (the default judge), so the
benchmark measures the judge without needing the proxy. Requests run one at a time.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from types import TracebackType
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from core.modelload import resolve_model_path
from core.settings import Settings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalJudgeServer:
    """`with LocalJudgeServer(settings) as server:` serves `settings.model` at `server.url`."""

    def __init__(self, settings: Settings) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = resolve_model_path(settings.model, settings.models_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
        self.model_name = settings.model
        self._lock = threading.Lock()
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.generated_tokens = 0
        self._server = uvicorn.Server(uvicorn.Config(self._app(), host="127.0.0.1", port=self.port,
                                                     log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True, name="judge-server")

    def __enter__(self) -> LocalJudgeServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the local judge server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def generate(self, messages: list[dict[str, Any]], temperature: float, max_tokens: int) -> tuple[str, int]:
        import torch

        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = self.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with self._lock, torch.inference_mode():
            out = self.model.generate(
                ids, do_sample=temperature > 0, temperature=temperature if temperature > 0 else None,
                top_p=None, top_k=None, max_new_tokens=max_tokens, pad_token_id=self.tokenizer.eos_token_id,
            )
        new = out[0, ids.shape[1]:]
        self.generated_tokens += int(new.shape[0])
        return str(self.tokenizer.decode(new, skip_special_tokens=True)), int(new.shape[0])

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            text, n = await asyncio.to_thread(
                self.generate, body["messages"], float(body.get("temperature", 1.0)),
                int(body.get("max_tokens") or 256),
            )
            return JSONResponse({
                "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self.model_name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": n, "total_tokens": n},
            })

        return app
