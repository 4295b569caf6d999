"""`learnproxy adapters list|promote V|rollback`: see adapter versions and move the served pointer."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from core import pointer
from core.db import make_engine, make_session_factory, session_scope
from core.migrate import upgrade
from core.settings import Settings
from learner.versions import find, list_versions


def register(sub: Any) -> None:
    p = sub.add_parser("adapters", help="list adapter versions, promote one, or roll back")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="all versions with state, parent and metrics")
    promote = actions.add_parser("promote", help="serve version V (id, vN or its name)")
    promote.add_argument("version")
    actions.add_parser("rollback", help="stop serving the current version; serve the one before")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    upgrade(settings.db_url)
    factory = make_session_factory(make_engine(settings.db_url))
    console = Console()
    with session_scope(factory) as session:
        if args.action == "list":
            console.print(_table(list_versions(session), pointer.current_version_id(session)))
            return 0
        if args.action == "promote":
            version = find(session, args.version)
            if version is None:
                console.print(f"[red]no adapter version {args.version!r}[/red]")
                return 1
            try:
                pointer.publish(session, version.id)
            except ValueError as exc:
                console.print(f"[red]{exc}[/red]")
                return 1
            console.print(f"serving {version.name}")
            return 0
        try:
            target = pointer.rollback(session)
        except ValueError as exc:
            console.print(f"[red]{exc}[/red]")
            return 1
        console.print(f"rolled back; now serving {'version ' + str(target) if target else 'the base model'}")
        return 0


def _table(rows: list[Any], served: int | None) -> Table:
    table = Table(title="adapter versions")
    for col in ("id", "name", "parent", "state", "method", "samples", "clip", "tok/s", "created"):
        table.add_column(col)
    for r in rows:
        s = (r.metrics or {}).get("summary", {})
        mark = " *" if r.id == served else ""
        table.add_row(str(r.id), r.name + mark, str(r.parent_id or "-"), r.state, r.method, str(r.n_samples),
                      f"{s['clip_frac']:.1%}" if "clip_frac" in s else "-",
                      f"{s['tokens_per_s']:.0f}" if "tokens_per_s" in s else "-",
                      r.created_at.strftime("%Y-%m-%d %H:%M"))
    return table
