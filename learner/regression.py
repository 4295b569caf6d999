"""Rolling back a served adapter version that the judge says made the agent worse.

Every main turn records the version that served it (`Turn.adapter_version_id`, None for the base
model) and, once judged, its score. So each version has a running approval: the mean score of the
turns it served, a human label standing in for the judge's score where there is one (when labels
override). A new version is trained from the version served when its training began
(`AdapterVersion.parent_id`; past rejected versions it trained on from, the served one they grew
from, `versions.served_ancestor`); if, once both have served `rollback_min_turns` judged turns, the
new one's mean is lower than its parent's by more than `rollback_margin`, the parent is served again
and the new version is marked `rolled_back`. The next version then trains from the parent.

`check_served` runs at the top of every train step, which the judge queues after each judged turn,
so a regression is caught as soon as there is evidence for it, not only when a batch is full. A
margin on a mean of a few ±1 scores is coarse: at 8 turns each and the same true approval of
one half, the newer version's mean falls more than 0.5 below its parent's in one check of ten, and
the check repeats as turns come in, so a small margin rolls back good versions.
The verdict, with both means and counts, is kept in the rolled-back version's metrics.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from statistics import mean

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import pointer
from core.models import AdapterState, AdapterVersion, Label, Turn, utcnow
from learner import versions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Approval:
    """The judged main turns one version served: how many, and their mean score."""

    version_id: int | None  # None: the base model, no adapter
    n: int
    mean: float | None


@dataclass(frozen=True)
class Check:
    version: Approval
    parent: Approval
    margin: float
    min_turns: int

    @property
    def decided(self) -> bool:
        return self.version.n >= self.min_turns and self.parent.n >= self.min_turns

    @property
    def regressed(self) -> bool:
        if not self.decided or self.version.mean is None or self.parent.mean is None:
            return False
        return self.version.mean < self.parent.mean - self.margin

    def as_json(self) -> dict[str, object]:
        return {"version": asdict(self.version), "parent": asdict(self.parent), "margin": self.margin,
                "min_turns": self.min_turns, "checked_at": utcnow().isoformat()}


def approval(session: Session, version_id: int | None, *, labels_override: bool) -> Approval:
    """Mean score of the judged main turns `version_id` served (labels first, when they override)."""
    served = Turn.adapter_version_id.is_(None) if version_id is None else Turn.adapter_version_id == version_id
    rows = session.execute(
        select(Turn.id, Turn.score).where(Turn.turn_type == "main", served, Turn.score.is_not(None))
    ).all()
    scores: dict[int, int] = {turn_id: score for turn_id, score in rows if score is not None}
    if labels_override and scores:
        labelled = session.execute(
            select(Label.turn_id, Label.value).where(Label.turn_id.in_(list(scores))).order_by(Label.id)
        ).all()
        scores.update(dict(labelled))  # ordered by id: the latest label of a turn wins
    return Approval(version_id, len(scores), mean(scores.values()) if scores else None)


def check_served(session: Session, *, margin: float, min_turns: int, labels_override: bool) -> Check | None:
    """The served version against its parent; None when the base model is served."""
    current = pointer.current_version_id(session)
    row = session.get(AdapterVersion, current) if current is not None else None
    if row is None:
        return None
    parent = versions.served_ancestor(session, row.parent_id)
    return Check(approval(session, row.id, labels_override=labels_override),
                 approval(session, parent, labels_override=labels_override), margin, min_turns)


def roll_back_if_worse(session: Session, *, margin: float, min_turns: int, labels_override: bool) -> Check | None:
    """Serve the parent again when the served version regressed; the check when it did, else None.
    The caller commits."""
    check = check_served(session, margin=margin, min_turns=min_turns, labels_override=labels_override)
    if check is None or not check.regressed:
        return None
    row = session.get(AdapterVersion, check.version.version_id)
    assert row is not None
    row.state = AdapterState.rolled_back  # before publishing the parent, which retires only `published` rows
    row.metrics = {**(row.metrics or {}), "rollback": check.as_json()}
    if check.parent.version_id is None:
        pointer.point_to(session, None)
    else:
        pointer.publish(session, check.parent.version_id)
    log.warning("rolled back %s: mean score %.2f over %d turns, its parent %.2f over %d", row.name,
                check.version.mean, check.version.n, check.parent.mean, check.parent.n)
    return check
