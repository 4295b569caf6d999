"""`learnproxy judge-eval`: how far the judge agrees with human labels (file or DB)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from core.db import make_engine, make_session_factory
from core.settings import Settings

DEFAULT_LABELS = Path(__file__).resolve().parent.parent / "tests" / "data" / "judge_labels.jsonl"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("judge-eval", help="Judge reliability against human labels.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--labels", type=Path, default=None, help="Labelled turns, JSONL.")
    source.add_argument("--from-db", action="store_true", help="Labelled turns in the DB vs stored scores.")
    parser.add_argument("--stage", default="cascade", choices=["signal", "reaction", "votes", "cascade"])
    parser.add_argument("--limit", type=int, default=None, help="Only the first N labelled cases.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings, console: Console | None = None) -> int:
    from judges.client import JudgeClient
    from judges.evaluate import Report, evaluate_cases, evaluate_db, load_cases

    console = console or Console()
    report: Report
    if args.from_db:
        engine = make_engine(settings.db_url)
        try:
            with make_session_factory(engine)() as session:
                report = evaluate_db(session)
        finally:
            engine.dispose()
        title = f"judge vs human labels in {settings.db_url}"
    else:
        path = args.labels or DEFAULT_LABELS
        cases = load_cases(path)[: args.limit]
        client = JudgeClient.from_settings(settings) if args.stage in ("votes", "cascade") else None
        try:
            report = evaluate_cases(cases, args.stage, settings, client)
        finally:
            if client is not None:
                client.close()
        title = f"stage={args.stage} on {path.name}"
    if not report.gold:
        console.print("no labelled cases to evaluate")
        return 1
    print_report(console, report, title)
    return 0


def print_report(console: Console, report: Any, title: str) -> None:
    from judges.evaluate import CLASSES, fmt, metrics

    m = report.metrics()
    confusion = Table(title=f"{title}: confusion (rows gold, columns judge), n={m['n']}")
    confusion.add_column("gold \\ judge")
    for c in CLASSES:
        confusion.add_column(f"{c:+d}", justify="right")
    for c, row in zip(CLASSES, m["matrix"], strict=True):
        confusion.add_row(f"{c:+d}", *(str(v) for v in row))
    console.print(confusion)
    base = metrics(report.gold, [1] * len(report.gold))
    summary = Table(title="agreement")
    summary.add_column("metric")
    summary.add_column("judge", justify="right")
    summary.add_column("always +1", justify="right")
    for key, label in [("accuracy", "accuracy"), ("leniency", "leniency P(judge>=0 | gold=-1)"),
                       ("strictness", "strictness P(judge=-1 | gold>=0)"),
                       ("precision_neg", "precision of -1"), ("kappa", "Cohen's kappa"),
                       ("unparsed_rate", "unparsed rate")]:
        summary.add_row(label, fmt(m[key]), fmt(base[key]))
    console.print(summary)
    if report.sources:
        console.print("decided by: " + ", ".join(f"{k}={v}" for k, v in sorted(report.sources.items())))
