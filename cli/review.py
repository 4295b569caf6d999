"""`learnproxy review sessions|session ID|turn ID|stats`: the review data as rich tables (or JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from cli.export import add_filter_args, filters_from_args
from core.db import make_engine, make_session_factory
from core.settings import Settings
from review import queries
from review.filters import FilterError
from review.render import content_text, short_time, signed


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "review", help="Review sessions, turns, judgements and stats.", description=__doc__
    )
    parser.add_argument("--json", action="store_true", help="Print JSON instead of tables.")
    sub = parser.add_subparsers(dest="review_command", required=True)
    sessions = sub.add_parser("sessions", help="Sessions with a turn matching the filters.")
    sessions.add_argument("--limit", type=int, default=30)
    sessions.add_argument("--offset", type=int, default=0)
    add_filter_args(sessions)
    sub.add_parser("session", help="Every turn of one session.").add_argument("id")
    sub.add_parser("turn", help="One turn in full.").add_argument("id", type=int)
    sub.add_parser("stats", help="Overview figures.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings, console: Console | None = None) -> int:
    console = console or Console()
    engine = make_engine(settings.db_url)
    try:
        with make_session_factory(engine)() as db:
            return COMMANDS[args.review_command](db, args, console)
    except FilterError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    except SQLAlchemyError as exc:
        console.print(
            f"[red]error:[/] cannot read the feedback DB ({exc.__class__.__name__}); "
            "check LEARNPROXY_DATABASE_URL"
        )
        return 1
    finally:
        engine.dispose()


def _json(console: Console, data: Any) -> int:
    # Plain print, not rich: scripts parse this, and rich would wrap long lines.
    print(json.dumps(data, indent=2, ensure_ascii=False), file=console.file or sys.stdout)
    return 0


def _sessions(db: Session, args: argparse.Namespace, console: Console) -> int:
    listing = queries.list_sessions(db, filters_from_args(args), limit=args.limit, offset=args.offset)
    if args.json:
        return _json(console, listing)
    table = Table(title=f"Sessions ({listing['total']} match)")
    for col in ("session", "last seen", "source", "turns", "judged", "mean", "hints", "labeled"):
        table.add_column(
            col, justify="right" if col in ("turns", "judged", "mean", "hints", "labeled") else "left"
        )
    for s in listing["data"]:
        mean = f"{s['mean_score']:+.2f}" if s["mean_score"] is not None else "—"
        table.add_row(
            s["id"],
            short_time(s["last_seen_at"]),
            s["source"],
            str(s["n_turns"]),
            str(s["n_judged"]),
            mean,
            str(s["n_hints"]),
            str(s["n_labeled"]),
        )
    console.print(table)
    return 0


def _session(db: Session, args: argparse.Namespace, console: Console) -> int:
    detail = queries.session_detail(db, args.id)
    if detail is None:
        console.print(f"[red]No session {args.id!r}.[/]")
        return 1
    if args.json:
        return _json(console, detail)
    table = Table(title=f"Session {detail['id']} ({len(detail['turns'])} turns, source {detail['source']})")
    for col in ("#", "turn id", "type", "status", "judge", "label", "adapter", "reply", "next state"):
        table.add_column(col, overflow="fold")
    for t in detail["turns"]:
        judge = f"{signed(t['score'])} {t['score_source'] or ''}".strip()
        label = signed(t["label"]["value"]) if t["label"] else "—"
        calls = " ".join(f"→{c['function']['name']}()" for c in t["tool_calls"] or [])
        reply = f"{t['response'][:80]} {calls}".strip()
        nxt = " | ".join(content_text(m.get("content"))[:60] for m in t["next_state"] or [])
        table.add_row(
            str(t["turn_index"]),
            str(t["id"]),
            t["turn_type"],
            t["status"],
            judge,
            label,
            f"v{t['adapter_version']}" if t["adapter_version"] else "base",
            reply,
            nxt[:80],
        )
    console.print(table)
    return 0


def _turn(db: Session, args: argparse.Namespace, console: Console) -> int:
    turn = queries.get_turn(db, args.id)
    if turn is None:
        console.print(f"[red]No turn {args.id}.[/]")
        return 1
    t = queries.turn_detail(db, turn)
    if args.json:
        return _json(console, t)
    head = (
        f"session {t['session_id']} · turn {t['turn_index']} · {t['turn_type']} · {t['status']} · "
        f"{'v' + str(t['adapter_version']) if t['adapter_version'] else 'base model'}"
    )
    console.print(
        Panel(
            content_text(t["messages"][-1].get("content")) if t["messages"] else "",
            title=f"Turn {t['id']}: last request message",
            subtitle=head,
        )
    )
    calls = "\n".join(f"{c['function']['name']}({c['function']['arguments']})" for c in t["tool_calls"] or [])
    console.print(Panel("\n".join(x for x in (t["response"], calls) if x) or "(empty)", title="Assistant"))
    nxt = "\n".join(f"[{m.get('role')}] {content_text(m.get('content'))}" for m in t["next_state"] or [])
    console.print(Panel(nxt or "(nothing yet)", title="Next state"))
    votes = Table(title=f"Judge: {signed(t['score'])} ({t['score_source'] or 'not judged'})")
    for col in ("kind", "#", "score", "raw output"):
        votes.add_column(col, overflow="fold")
    for v in t["votes"] + t["hint_candidates"]:
        votes.add_row(v["kind"], str(v["index"]), signed(v["score"]), v["raw_text"])
    console.print(votes)
    console.print(
        f"Hint: {t['hint'] or '—'}  ·  advantage: {json.dumps(t['advantage']) if t['advantage'] else '—'}"
    )
    for lab in t["label_history"]:
        console.print(
            f"Label {signed(lab['value'])} by {lab['author']} at {short_time(lab['created_at'])}"
            + (f": {lab['hint']}" if lab["hint"] else "")
        )
    return 0


def _stats(db: Session, args: argparse.Namespace, console: Console) -> int:
    s = queries.stats(db)
    if args.json:
        return _json(console, s)
    share = f"{s['judged_share']:.0%}" if s["judged_share"] is not None else "—"
    totals = Table(title="Feedback DB")
    for col in ("sessions", "turns", "main", "judged", "with hint", "labeled", "serving"):
        totals.add_column(col, justify="right")
    totals.add_row(
        str(s["sessions"]),
        str(s["turns"]),
        str(s["main_turns"]),
        f"{s['judged']} ({share})",
        str(s["with_hint"]),
        str(s["labeled"]),
        f"v{s['current_version']}" if s["current_version"] is not None else "base",
    )
    console.print(totals)
    dist = Table(title="Scores")
    for col in ("-1", "0", "+1", "not judged"):
        dist.add_column(col, justify="right")
    d = s["score_distribution"]
    dist.add_row(str(d["-1"]), str(d["0"]), str(d["1"]), str(d["none"]))
    console.print(dist)
    days = Table(title="Turns per day")
    days.add_column("day")
    days.add_column("turns", justify="right")
    for row in s["turns_per_day"]:
        days.add_row(row["day"], str(row["turns"]))
    console.print(days)
    a = s["agreement"]
    rate = f"{a['rate']:.0%}" if a["rate"] is not None else "—"
    console.print(f"Judge agreement with human labels: {rate} over {a['compared']} turns")
    return 0


COMMANDS: dict[str, Callable[[Session, argparse.Namespace, Console], int]] = {
    "sessions": _sessions,
    "session": _session,
    "turn": _turn,
    "stats": _stats,
}
