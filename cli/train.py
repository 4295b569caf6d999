"""`learnproxy train --once`: one training step by hand, with a progress bar, then a summary."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from core.db import make_engine, make_session_factory
from core.migrate import upgrade
from core.settings import Settings
from learner.config import TrainConfig
from learner.run import count_ready, run_train_step


def register(sub: Any) -> None:
    p = sub.add_parser("train", help="run one LoRA training step on the judged turns")
    p.add_argument("--once", action="store_true", required=True, help="one step, then exit")
    p.add_argument("--force", action="store_true", help="train even on fewer samples than a batch")
    p.add_argument("--steps", type=int, help="optimizer steps on the batch (overrides steps_per_batch)")
    p.add_argument("--no-publish", action="store_true", help="leave the new version ready, not served")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    console = Console()
    if args.no_publish:
        settings = settings.model_copy(update={"auto_publish": False})
    upgrade(settings.db_url)
    factory = make_session_factory(make_engine(settings.db_url))
    overrides = {"steps_per_batch": args.steps} if args.steps else {}
    config = TrainConfig.from_settings(settings, **overrides)
    ready = count_ready(factory, settings, config)
    console.print(f"{len(ready.samples)} samples ready (batch {config.batch_size}, method {config.method}); "
                  f"{ready.n_stale} stale dropped")
    with Progress(TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("train", total=config.steps_per_batch, info="loading model")

        def progress(step: int, steps: int, m: dict[str, float]) -> None:
            info = (f"loss {m['loss']:.4f} clip {m['clip_frac']:.1%} kl {m['kl']:.4f} "
                    f"{m['tokens_per_s']:.0f} tok/s")
            bar.update(task, completed=step, info=info)

        version = run_train_step(factory, settings, config=config, force=args.force, reason="cli",
                                 progress=progress)
    if version is None:
        console.print("nothing trained: too few samples (use --force) or another run is training")
        return 1
    summary = version.metrics.get("summary", {})
    console.print(f"[green]{version.name}[/green] {version.state}: {version.n_samples} samples, "
                  f"clip {summary.get('clip_frac', 0):.1%}, {summary.get('tokens_per_s', 0):.0f} tok/s, "
                  f"saved in {version.path}")
    return 0
