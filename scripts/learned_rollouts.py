"""What a benchmark run's learner actually learned from teacher rollouts, read from the run's DB.

    python scripts/learned_rollouts.py RUN.db [--user USER] [--marker "in short,"]
    (RUN.db: a run's learnproxy.db, left by `learnproxy bench learn --keep DIR` under
    DIR/<method>-<user>-s<seed>/; without --user the user is read from that folder's name)

Each trained turn's `advantage` note lists the rollouts the hinted teacher wrote for it, with the
screen's verdict and whether the learner learned it. This counts them for every hinted main turn,
apart for hints that state the rule (they contain `--marker`) and for the other complaints, and for
first turns against redo turns: rollouts written, learned, learned and meeting the user's rule on a
reply that passes the quality guard, learned and off topic. A second table counts, for the rollouts
not learned, each screen check they failed (one rollout can fail several), at the thresholds of
the run's learner (defaults, with the run's `train_config.json` beside its DB applied). A third
table gives, for each version the hinted turns were trained into, the distilled turns and their mean
token-OPD advantage per token (and, where logged, their mean teacher-student gap before opd_clip and
opd_floor), and the rollouts written and learned: where a run's curve falls late,
it shows whether distillation still had rollouts to teach. Unlike
scripts/rollout_probe.py it generates nothing: these are the rollouts of the run itself, at the
student of their own batch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from learner.config import TrainConfig  # noqa: E402
from learner.rollouts import Verdict, failed_checks, quoted, repeated  # noqa: E402
from scripts.rollout_probe import current_question  # noqa: E402

KEYS = ("learned", "learned, meet the rule", "learned, off topic")


def main(db: Path, user_name: str, marker: str) -> None:
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from bench.learn.quality import QualityGuard
    from bench.learn.users import all_users
    from core.models import Turn
    from core.turns import view_of

    user, guard = all_users()[user_name], QualityGuard()
    assert user.check is not None
    config = TrainConfig.from_json({**TrainConfig().to_json(), **_overrides(db)})
    failed: Counter[str] = Counter()
    counts: Counter[tuple[str, str, str]] = Counter()
    hints: Counter[tuple[str, str]] = Counter()
    by_version: dict[int, Counter[str]] = defaultdict(Counter)
    opd: dict[int, list[float]] = defaultdict(list)
    gap: dict[int, list[float]] = defaultdict(list)  # teacher - student before clip and opd_floor
    phrases = 0
    with Session(create_engine(f"sqlite:///file:{db}?mode=ro&uri=true")) as s:
        for turn in s.scalars(select(Turn).where(Turn.hint.is_not(None), Turn.turn_type == "main")):
            kind = "states the rule" if marker in turn.hint.lower() else "other complaint"
            when = "first turn" if turn.turn_index == 0 else "redo turn"
            hints[(kind, when)] += 1
            note_of_turn = turn.advantage or {}
            version = turn.trained_version_id
            if version is not None and note_of_turn.get("distilled"):
                opd[version].append(float(note_of_turn.get("opd", 0.0)))
                if "opd_gap" in note_of_turn:  # logged from opd_floor's commit on
                    gap[version].append(float(note_of_turn["opd_gap"]))
            notes = note_of_turn.get("rollouts", [])
            if not notes:
                continue
            question = current_question(view_of(s, turn).messages, [q.text for q in user.train])
            for note in notes:
                if note.get("phrase_only"):  # the asked phrase alone (rollout_asked_phrase), not a reply
                    phrases += 1
                    continue
                passed = guard.check(question, note["text"]).passed
                met = passed and not user.check(question, note["text"])
                learned = bool(note.get("learned"))
                if not learned:
                    failed.update(why_not(note, config))
                if version is not None:
                    by_version[version].update({"written": 1, "learned": int(learned)})
                for key, on in (("written", True), ("learned", learned), (KEYS[1], learned and met),
                                (KEYS[2], learned and not passed)):
                    counts[(kind, when, key)] += on
                print(f"{turn.id:>4} {when:<10} {kind:<15} learned={learned!s:<5} met={met!s:<5} "
                      f"hint={turn.hint[:50]!r} {note['text'][:70]!r}", file=sys.stderr)
    print("| hint | turn | hinted turns | rollouts written | " + " | ".join(KEYS) + " |")
    print("|---|---|---|---|" + "---|" * len(KEYS))
    for kind in ("states the rule", "other complaint"):
        for when in ("first turn", "redo turn"):
            if hints[(kind, when)]:
                cells = [str(counts[(kind, when, k)]) for k in ("written", *KEYS)]
                print(f"| {kind} | {when} | {hints[(kind, when)]} | " + " | ".join(cells) + " |")
    print("\n| not learned | " + " | ".join(CHECKS) + " |")
    print("|---|" + "---|" * len(CHECKS))
    not_learned = sum(n for k, n in counts.items() if k[2] == "written") - sum(
        n for k, n in counts.items() if k[2] == "learned")
    print(f"| {not_learned} | " + " | ".join(str(failed[c]) for c in CHECKS) + " |")
    print("\n| trained into | distilled turns | mean token-OPD advantage | mean teacher-student gap "
          "| rollouts written | learned |")
    print("|---|---|---|---|---|---|")
    for version in sorted(set(by_version) | set(opd)):
        mean = f"{sum(opd[version]) / len(opd[version]):.2f}" if opd[version] else "-"
        raw = f"{sum(gap[version]) / len(gap[version]):.2f}" if gap[version] else "-"
        print(f"| v{version} | {len(opd[version])} | {mean} | {raw} | {by_version[version]['written']} | "
              f"{by_version[version]['learned']} |")
    if phrases:
        print(f"\nThe asked phrase alone was learned for {phrases} turns (rollout_asked_phrase).")


CHECKS = ("gain", "echo", "copy", "relevance", "opening", "header", "repeat", "asked", "asked_again", "cut",
          "hollow")


def why_not(note: dict, config: TrainConfig) -> list[str]:
    """The screen checks a stored rollout note failed (none: it was kept but not picked)."""
    verdict = Verdict(note["gain"], note["echo"], note["copied"], note["learned"], note.get("relevance"),
                      note.get("grounding"), bool(note.get("leaked")), repeated(note["text"]),
                      note.get("opens_as_asked"), note.get("asked_again"), note.get("finished"), note.get("hollow"))
    return failed_checks(verdict, min_gain=config.min_gain(bool(note.get("asked_prefix"))),
                         max_echo=config.rollout_max_echo, max_copy=config.rollout_max_copy,
                         min_relevance=config.rollout_min_relevance,
                         min_grounding=config.rollout_min_grounding, max_repeat=config.rollout_max_repeat)


def _overrides(db: Path) -> dict:
    path = db.parent / "train_config.json"
    return json.loads(path.read_text()) if path.exists() else {}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("db", type=Path)
    p.add_argument("--user", default=None, help="the user the run trained on (default: from the folder name)")
    p.add_argument("--marker", default=None, help="a hint that contains this (lowercase) states the rule "
                   "(default: the phrase the user's hint quotes, such as 'my advice')")
    a = p.parse_args()
    from bench.learn.users import all_users

    users = all_users()
    name = a.user or next((u for u in users if f"-{u}-s" in a.db.parent.name), None)
    if name not in users:
        p.error(f"--user: {name!r} is not a benchmark user; pick one of {', '.join(sorted(users))}"
                if name else f"--user: none given, and {a.db.parent.name!r} does not name a user")
    marker = a.marker or min(quoted(users[name].hint), default=None)
    if not marker:
        p.error(f"--marker: {name}'s hint quotes no phrase; say what marks a hint that states the rule")
    main(a.db, name, marker)
