"""`learnproxy` entry point. Each subcommand lives in its own module with `register(subparsers)`.

A module's `register` adds its parser and sets `func(args, settings) -> int` as the default.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from core.settings import get_settings

COMMAND_MODULES = [
    "cli.serve",
    "cli.worker",
    "cli.export",
    "cli.review",
    "cli.judge_eval",
    "cli.train",
    "cli.adapters",
    "cli.sglang_command",
    "cli.bench",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="learnproxy", description=__doc__)
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.func(args, get_settings()) or 0)


if __name__ == "__main__":
    sys.exit(main())
