"""`learnproxy export`: write logged turns as a JSON Lines or Parquet dataset, one record per turn."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from core.db import make_engine, make_session_factory
from core.settings import Settings
from review.export import BATCH_SIZE, export_rows, write_jsonl, write_parquet
from review.filters import SCORE_CHOICES, FilterError, TurnFilters

log = logging.getLogger(__name__)


def add_filter_args(parser: argparse.ArgumentParser) -> None:
    """The turn filters shared by `export` and `review sessions`."""
    parser.add_argument("--since", help="Only turns at or after this ISO date/datetime.")
    parser.add_argument("--until", help="Only turns at or before this ISO date/datetime.")
    parser.add_argument("--score", choices=SCORE_CHOICES, help="Judge score; 'none' = not judged.")
    parser.add_argument("--has-hint", dest="has_hint", action="store_const", const=True, default=None)
    parser.add_argument("--no-hint", dest="has_hint", action="store_const", const=False)
    parser.add_argument("--score-source", help="signal, reaction, votes, ...")
    parser.add_argument("--turn-type", choices=("main", "side"))
    parser.add_argument("--adapter-version", help="A version id, or 'base'.")
    parser.add_argument("--labeled", dest="labeled", action="store_const", const=True, default=None)
    parser.add_argument("--unlabeled", dest="labeled", action="store_const", const=False)
    parser.add_argument("--search", dest="q", help="Text in the session id or the response.")


def filters_from_args(args: argparse.Namespace) -> TurnFilters:
    return TurnFilters.parse(
        since=args.since,
        until=args.until,
        score=args.score,
        has_hint=args.has_hint,
        score_source=args.score_source,
        turn_type=args.turn_type,
        adapter_version=args.adapter_version,
        labeled=args.labeled,
        q=args.q,
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="Export turns as a dataset (JSON Lines or Parquet).", description=__doc__
    )
    parser.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    parser.add_argument("-o", "--output", help="Output file; '-' or absent writes JSON Lines to stdout.")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="Turns read per DB query.")
    add_filter_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        filters = filters_from_args(args)
    except FilterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    to_stdout = args.output in (None, "-")
    if args.format == "parquet" and to_stdout:
        print("error: --format parquet needs --output FILE", file=sys.stderr)
        return 2
    engine = make_engine(settings.db_url)
    rows = export_rows(make_session_factory(engine), filters, batch_size=max(1, args.batch_size))
    try:
        if args.format == "parquet":
            n = write_parquet(rows, Path(args.output), batch_size=max(1, args.batch_size))
        elif to_stdout:
            n = write_jsonl(rows, sys.stdout)
        else:
            with open(args.output, "w", encoding="utf-8") as out:
                n = write_jsonl(rows, out)
    except SQLAlchemyError as exc:
        print(
            f"error: cannot read the feedback DB ({exc.__class__.__name__}); check LEARNPROXY_DATABASE_URL",
            file=sys.stderr,
        )
        return 1
    finally:
        engine.dispose()
    print(f"exported {n} turns" + ("" if to_stdout else f" to {args.output}"), file=sys.stderr)
    return 0
