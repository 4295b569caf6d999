"""Standing instructions: what the users of a deployment keep asking for, carried into the hinted
teacher's context on turns whose own hint does not say it.

A hint is taken from the next state of one turn, so it says only what that reply got wrong. Once
the student has learned a user's preference, the replies that still fail are corrected for
something else ("That doesn't answer my question at all."), and the teacher shown only that hint
writes without the preference. The student then unlearns it: the −1 reward pushes down the whole
reply, the learned part included, and the teacher's logprobs rate the learned part low. The
benchmark's runs showed it twice, both on the base model as teacher: an analogy user's learned
"Imagine …" opener went when later corrections asked only for an explanation, and a reassuring
user's "Good news:" opener fell from 0.50 to 0.00 held-out once 12 of the 16 training replies that
opened with it were corrected as off topic.

One adapter serves one deployment, so a preference stated again and again across its sessions is the
deployment's preference: `recurring` finds the instructions (hints taken from what a user said to
do, hint source `instruction`) given in at least `min_sessions` sessions among the latest `window`
such turns. Instructions that ask for the same thing in other words count as one: they quote the
same phrase ("Begin with 'In short,'" and "Open with 'In short,' and what to do.") or share most of
their word trigrams; two that quote different phrases never do. Each is stated in the phrasing
given in the most sessions. `missing_from` leaves out those the turn's own hint already says, and
the learner puts the rest before that hint (`Sample.teacher_hint`, `with_standing`). A hint that
only complains then says what to do as well, so it gets teacher rollouts even with
`rollout_complaints` off.

The cost: a one-off instruction never stands, and a preference given in fewer sessions than
`min_sessions`, or one that changed within the window, is carried late or too long. Judge-written and
human-label hints are not counted; they speak about one reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.models import Turn
from learner.rollouts import asked_openings, quoted, share_in

SAME_SHARE = 0.5  # share of the shorter instruction's word trigrams the other must hold


def same(a: str, b: str) -> bool:
    """Whether two instructions ask for the same thing: a phrase both quote, or (unless each quotes
    phrases of its own) most of the shorter one's word trigrams found in the other."""
    qa, qb = quoted(a), quoted(b)
    if qa and qb:
        return bool(qa & qb)
    shorter, longer = sorted((a, b), key=len)
    return share_in(shorter, longer) >= SAME_SHARE


@dataclass
class _Group:
    sessions: set[str] = field(default_factory=set)
    phrasings: dict[str, set[str]] = field(default_factory=dict)  # text -> sessions it was given in
    latest: int = 0  # id of the newest turn in the group

    def add(self, text: str, session_id: str, turn_id: int) -> None:
        self.sessions.add(session_id)
        self.phrasings.setdefault(text, set()).add(session_id)
        self.latest = max(self.latest, turn_id)

    def phrasing(self) -> str:
        """The phrasing given in the most sessions (of equals, the most recent: turns come newest first)."""
        return max(self.phrasings, key=lambda text: len(self.phrasings[text]))


def recurring(session: Session, *, most: int, min_sessions: int, window: int) -> list[str]:
    """Up to `most` instructions given in at least `min_sessions` sessions among the latest `window`
    instruction-hinted main turns, the most widely given first (then the most recent)."""
    if most <= 0:
        return []
    stmt = (select(Turn.id, Turn.session_id, Turn.hint)
            .where(Turn.turn_type == "main", Turn.hint_source == "instruction", Turn.hint.is_not(None))
            .order_by(Turn.id.desc()).limit(window))
    groups: list[tuple[str, _Group]] = []  # (first phrasing seen, its group)
    for turn_id, session_id, hint in session.execute(stmt):
        text = " ".join((hint or "").split())
        if not text:
            continue
        group = next((g for first, g in groups if same(first, text)), None)
        if group is None:
            group = _Group()
            groups.append((text, group))
        group.add(text, session_id, turn_id)
    standing = [g for _, g in groups if len(g.sessions) >= min_sessions]
    standing.sort(key=lambda g: (len(g.sessions), g.latest), reverse=True)
    return [g.phrasing() for g in standing[:most]]


def recurring_openings(session: Session, *, min_sessions: int, window: int) -> set[str]:
    """The phrases the deployment's recurring instructions (`recurring`) ask replies to begin with
    (normalized, see `rollouts.normalized_phrase`)."""
    texts = recurring(session, most=window, min_sessions=min_sessions, window=window)
    return set().union(*(asked_openings(text) for text in texts))


def with_standing(hint: str, standing: Sequence[str]) -> str:
    """What the hinted teacher is shown: the standing instructions, one a line, then the turn's own hint."""
    return "\n".join([*standing, hint]).strip()


def missing_from(hint: str, standing: Sequence[str]) -> tuple[str, ...]:
    """The standing instructions `hint` does not already say."""
    return tuple(s for s in standing if not same(s, hint))
