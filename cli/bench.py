"""`learnproxy bench`: run benchmarks and write their sections into docs/BENCHMARKS.md.

Each benchmark module returns a markdown section; it replaces the text between its markers, so a
partial run leaves the other sections as they were.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.settings import Settings

SECTIONS = {
    "proxy": "bench.proxy_overhead",
    "engine": "bench.engine_speed",
    "storage": "bench.storage",
    "judge": "bench.judge",
    "train": "bench.train_speed",
    "swap": "bench.swap",
}
DOC = Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="run benchmarks into docs/BENCHMARKS.md")
    p.add_argument("which", nargs="?", default="all", help=f"all, learn, or one of {', '.join(SECTIONS)}")
    p.add_argument("--quick", action="store_true", help="smaller runs")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for `bench learn`")
    p.set_defaults(func=run)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"torch {torch.__version__}, {platform.system()} {platform.release()}")


def write_section(name: str, body: str, command: str) -> None:
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n\nWritten by `make bench` (`learnproxy bench all`).\n"
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    block = (f"<!-- bench:{name} -->\n{body.strip()}\n\n"
             f"_Command: `{command}` · {stamp} · {machine()}_\n<!-- /bench:{name} -->")
    pattern = re.compile(rf"<!-- bench:{name} -->.*?<!-- /bench:{name} -->", re.S)
    text = pattern.sub(lambda _m: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    DOC.write_text(text)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.which == "learn":
        from bench.learn.runner import main as learn_main

        return learn_main((["--quick"] if args.quick else []) + list(args.rest), settings)
    # `bench engine --quick` puts --quick after the name, where argparse hands it to `rest`
    quick = args.quick or "--quick" in args.rest
    unknown = [a for a in args.rest if a != "--quick"]
    if unknown:
        print(f"unknown arguments for `bench {args.which}`: {' '.join(unknown)}", file=sys.stderr)
        return 2
    names = list(SECTIONS) if args.which == "all" else [args.which]
    failed = 0
    for name in names:
        if name not in SECTIONS:
            print(f"unknown benchmark {name!r}", file=sys.stderr)
            return 2
        command = f"learnproxy bench {name}{' --quick' if quick else ''}"
        print(f"== {command}", flush=True)
        try:
            body = importlib.import_module(SECTIONS[name]).run(settings, quick=quick)
        except Exception as exc:  # one broken benchmark must not lose the others' figures
            print(f"   {name} failed: {exc!r}", file=sys.stderr)
            failed += 1
            continue
        print(body, flush=True)
        write_section(name, body, command)
    return 1 if failed else 0
