"""Fifty concurrent requests through a real server end as exactly fifty logged turns, token-exact."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from sqlalchemy import select

from core.db import make_engine, make_session_factory
from core.modelload import load_tokenizer
from core.models import Base, Turn
from core.settings import Settings
from core.turns import load_turn
from proxy.app import create_app
from proxy.engines.null import NULL_LOGPROB, NullEngine
from tests.utils.server import run_server

N = 50


async def _fire(url: str, model: str) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def one(i: int) -> httpx.Response:
            body = {
                "model": model,
                "messages": [{"role": "user", "content": f"question number {i}"}],
                "stream": i % 2 == 0,  # half streamed, half not
            }
            return await client.post("/v1/chat/completions", json=body)

        return await asyncio.gather(*(one(i) for i in range(N)))


def test_fifty_concurrent_requests_make_fifty_turns(tmp_path: Path, model_path: str) -> None:
    settings = Settings(data_dir=tmp_path / "data", model=model_path, enqueue=False, auto_train=False)
    db = make_engine(settings.db_url)
    Base.metadata.create_all(db)
    tokenizer = load_tokenizer(model_path)
    reply = tokenizer.encode("The answer is forty-two.", add_special_tokens=False)
    engine = NullEngine(reply, eos_id=tokenizer.eos_token_id)
    with run_server(create_app(settings, engine=engine)) as url:
        model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
        responses = asyncio.run(_fire(url, model))
    # Leaving run_server shut the app down, which flushed the write-behind logger.
    assert [r.status_code for r in responses] == [200] * N
    with make_session_factory(db)() as session:
        ids = session.scalars(select(Turn.id)).all()
        views = [load_turn(session, i) for i in ids]
    db.dispose()
    assert len(ids) == N
    questions = set()
    for view in views:
        assert view is not None and view.turn.error is None
        assert len(view.response_logprobs) == len(view.response_token_ids) == len(reply) + 1  # + eos
        assert view.response_token_ids[:-1] == reply
        assert view.response_logprobs == [NULL_LOGPROB] * (len(reply) + 1)
        assert tokenizer.decode(view.prompt_token_ids).endswith("<|im_start|>assistant\n")
        questions.add(view.messages[-1]["content"])
    assert questions == {f"question number {i}" for i in range(N)}
