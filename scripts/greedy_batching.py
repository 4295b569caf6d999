"""Do the embedded engine's greedy replies depend on what shares the batch?

    python scripts/greedy_batching.py [--users advice,bottomline]    (CPU, about five minutes)

Starts `learnproxy serve` on the embedded defaults with training off (the benchmark's own server
helper) and asks for each user's whole held-out pool at temperature 0, in four ways:

- `one at a time`, twice: each prompt decoded alone;
- `8 at once`: every prompt sent through 8 threads, as the learning benchmark did before
  commit 9e74213 (a prompt's batch-mates then depend on which replies end first);
- `chunks`, twice: `bench.learn.sim.evaluate` as it is now, 8 prompts at a time, the next chunk once
  the last is answered; the second pass sends each chunk's prompts in reverse order.

It prints, per user and way, how many replies pass the quality guard and how many replies differ from the first
one-at-a-time pass and from the first pass of the same way.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from openai import OpenAI  # noqa: E402

from bench.learn.quality import QualityGuard  # noqa: E402
from bench.learn.server import Server, child_settings  # noqa: E402
from bench.learn.sim import EVAL_CONCURRENCY, Chat, eval_chunks, evaluate  # noqa: E402
from bench.learn.users import Prompt, User, all_users  # noqa: E402
from core.settings import Settings  # noqa: E402


class Recording(Chat):
    """The benchmark's chat, keeping each reply by the prompt it answered."""

    replies: dict[str, str]

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        object.__setattr__(self, "replies", {})
        object.__setattr__(self, "lock", threading.Lock())

    def send(self, messages: list[dict[str, Any]], **kw: Any) -> Any:
        choice = super().send(messages, **kw)
        with self.lock:  # type: ignore[attr-defined]
            self.replies[messages[-1]["content"]] = choice.message.content or ""
        return choice


def reversed_chunks(prompts: tuple[Prompt, ...]) -> tuple[Prompt, ...]:
    """The same chunks as `evaluate` makes, each in reverse order."""
    return tuple(p for chunk in eval_chunks(prompts) for p in reversed(chunk))


def ways(chat: Recording, guard: QualityGuard, user: User) -> list[tuple[str, Callable[[], None]]]:
    prompts = user.heldout

    def ask(p: Prompt) -> None:
        chat.send([{"role": "user", "content": p.text}], session="eval-batching", side=True, done=True,
                  tools_=user.tools, model=chat.model, temperature=0.0)

    def alone() -> None:
        for p in prompts:
            ask(p)

    def all_at_once() -> None:
        with ThreadPoolExecutor(max_workers=EVAL_CONCURRENCY) as pool:
            list(pool.map(ask, prompts))

    def chunks() -> None:
        evaluate(chat, user, prompts, guard, model=chat.model)

    def chunks_reversed() -> None:
        evaluate(chat, user, reversed_chunks(prompts), guard, model=chat.model)

    return [("one at a time", alone), ("one at a time", alone), ("8 at once", all_at_once),
            ("8 at once", all_at_once), ("chunks", chunks), ("chunks", chunks_reversed)]


def main(user_names: list[str]) -> None:
    guard = QualityGuard()
    users = all_users()
    with tempfile.TemporaryDirectory() as tmp:
        settings = child_settings(Settings(), Path(tmp), method="off")
        with Server(settings, Path(tmp) / "server.log") as server:
            client = OpenAI(base_url=f"{server.base_url}/v1", api_key="x", timeout=300.0)
            chat = Recording(client, settings.served_model_name, 64, 0.0)
            print("| user | way | pass | guard | differ from one at a time | differ from its first pass |")
            print("|---|---|---|---|---|---|")
            for name in user_names:
                prompts, n = users[name].heldout, len(users[name].heldout)
                firsts: dict[str, dict[str, str]] = {}
                for way, run in ways(chat, guard, users[name]):
                    chat.replies.clear()
                    run()
                    got = dict(chat.replies)
                    first = firsts.setdefault(way, got)
                    alone = firsts["one at a time"]
                    graded = guard.check_many([(p.text, got[p.text]) for p in prompts])
                    print(f"| {name} | {way} | {1 if first is got else 2} | {sum(g.passed for g in graded)}/{n} | "
                          f"{sum(got[p.text] != alone[p.text] for p in prompts)} | "
                          f"{sum(got[p.text] != first[p.text] for p in prompts)} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", default="advice,bottomline")
    args = parser.parse_args()
    main([u.strip() for u in args.users.split(",") if u.strip()])
