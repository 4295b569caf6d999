"""Grade a finished run's held-out replies again, under the simulated user's rule as it is now.

    python scripts/regrade.py RUN.db --user analogy [--json OUT.json]
    (RUN.db: a run's learnproxy.db, left by `learnproxy bench learn --keep DIR` under DIR/<run>/)
    python scripts/regrade.py regrade_<tag>_<user>_seed<S>.json --user analogy [--json OUT.json]
    (an earlier regrade's JSON, which holds every reply, for a run whose DB is gone)
    ... [--todo TODO.jsonl]
    (also writes the replies not yet in bench/learn/data/answer_labels.jsonl, to be labelled by reading)
    ... [--no-keys]
    (grades with the guard as it was before answer keys, for tables made before 2026-12-07's keys;
    same verdicts, but a reply with nothing besides its labels is counted `unanswered`, not `irrelevant`)

Every evaluation reply is in the run's DB as a side turn, with the version that served it. When a
user's rule is tightened (a loophole found in what a run learned), this reads those replies back,
matches each to `--user`'s held-out prompt by its request, and grades it with the rule and the
quality guard of today, with `bench.learn.sim.evaluate`'s grading and rates, so earlier runs can be
read under the same rule as new ones. The last column counts the first reason each unsatisfied reply
fails: `unanswered` when the guard finds nothing an answer would say (no content besides labels and
talk about the assistant, or no answer key), `irrelevant` for its other checks, else the rule's
code, `too_long` for a reply cut at the token limit. It generates nothing. A version evaluated twice
(the runner's last point repeats the served version) is graded once per reply.

Without answer keys (`bench/learn/keys.py`) the quality guard passes most replies that stay on topic
without answering, and with them it still passes about a quarter of those. So the table also reads
each reply's label in `answer_labels.jsonl` (replies of earlier runs, each labelled by reading whether
it answers, without sight of the guard): `answers` counts the replies labelled as answering,
`satisfied+answers` those that are also satisfied, and `unread` those with no label yet.

An earlier regrade's JSON stores each reply's question and text, and from this version on whether it
was cut at the token limit (`cut`). Older files lack it; a reply is then taken as cut when its first
reason was `too_long`. For a user whose rule has no `too_long` code of its own (analogy, bottomline,
casual, steps) and a rule that has only grown stricter since, that is exact: a reply that failed for
another reason fails again anyway.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(db: Path, user_name: str, out: Path | None, todo: Path | None = None, keys: bool = True) -> None:
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from bench.learn.quality import REPLIES, QualityGuard, load_labels
    from bench.learn.sim import grade_reply, grade_text, summarize
    from bench.learn.users import all_users
    from core.models import Turn
    from core.turns import view_of

    user = all_users()[user_name]
    heldout = {p.text for p in user.heldout}
    guard = QualityGuard() if keys else QualityGuard(keys={})
    read = {(x["question"], x["reply"].strip()): bool(x["answers"]) for x in load_labels(REPLIES)}
    unread: dict[tuple[str, str], str] = {}
    replies: dict[int | None, dict[str, tuple[str, bool]]] = defaultdict(dict)
    if db.suffix == ".json":
        for row in json.loads(db.read_text())["versions"]:
            for r in row["replies"]:
                replies[row["version"]][r["question"]] = (r["reply"], r.get("cut", r["reason"] == "too_long"))
    else:
        engine = create_engine(f"sqlite:///file:{db}?mode=ro&uri=true")
        with Session(engine) as session:
            for turn in session.scalars(select(Turn).where(Turn.turn_type == "side").order_by(Turn.id)):
                messages = view_of(session, turn, with_tokens=False).messages
                asked = messages[0].get("content") if messages else None
                if asked in heldout:
                    replies[turn.adapter_version_id][asked] = (turn.response_text or "",
                                                               turn.finish_reason == "length")
    rows = []
    print("| version | n | satisfied | guard | rule | words | answers | satisfied+answers | unread "
          "| why not (first reason per reply) |\n|---|---|---|---|---|---|---|---|---|---|")
    for version in sorted(replies, key=lambda v: -1 if v is None else v):
        graded = [grade_reply(user, guard, question, reply, truncated=cut)
                  | {"question": question, "cut": cut,
                     "reason": grade_text(user, guard, question, reply, truncated=cut)[1]}
                  for question, (reply, cut) in sorted(replies[version].items())]
        for g in graded:
            g["answers"] = read.get((g["question"], g["reply"].strip()))
            if g["answers"] is None:
                unread.setdefault((g["question"], g["reply"].strip()), g["reply"])
        row = {"version": version, **summarize(graded), "replies": graded}
        rows.append(row)
        why = Counter(g["reason"] for g in graded if not g["satisfied"])
        print(f"| {'base' if version is None else f'v{version}'} | {row['n']} | {row['satisfaction']:.2f} | "
              f"{row['guard_rate']:.2f} | {row['rule_rate']:.2f} | {row['mean_words']:.0f} | "
              f"{sum(g['answers'] is True for g in graded)} | "
              f"{sum(g['satisfied'] and g['answers'] is True for g in graded)} | "
              f"{sum(g['answers'] is None for g in graded)} | "
              f"{', '.join(f'{reason} {n}' for reason, n in sorted(why.items()))} |")
    if out is not None:
        out.write_text(json.dumps({"db": str(db), "user": user_name, "versions": rows}, indent=1))
    if todo is not None:
        todo.write_text("".join(json.dumps({"id": i, "question": q, "reply": reply}, ensure_ascii=False) + "\n"
                                for i, ((q, _), reply) in enumerate(unread.items())))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("db", type=Path)
    p.add_argument("--user", default="analogy")
    p.add_argument("--json", type=Path)
    p.add_argument("--todo", type=Path, help="write the replies with no label by reading here, one JSON per line")
    p.add_argument("--no-keys", action="store_true", help="grade without the answer keys, as before 2026-12-07")
    args = p.parse_args()
    main(args.db, args.user, args.json, args.todo, keys=not args.no_keys)
