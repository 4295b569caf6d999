"""One training step end to end: collect samples, take the guard, train, save, record, publish.

With `rollback_margin` set, a step first rolls the served version back if the judge scored its turns
worse than its parent's (learner/regression.py). A version whose parent was rolled back while it
trained is saved but not published: it learned from the weights that did worse. With
`publish_check` set, a version whose greedy replies to recent requests fail where the base
model's do not (or, with `publish_check_canary`, whose replies to everyday requests never trained on
fail) is tried again at half its step from its parent (`publish_check_tries` times in all), and if
none passes it is saved as `rejected` and never published (learner/publish_check.py). Its parent is
the served version, or with `publish_check_train_on` the newest rejected one while the rejections in a
row stay within that count (versions.parent_for): serving waits for a version that passes, learning
goes on.

`run_train_step` is the plain function behind the Celery task and `learnproxy train --once`; the
tests call it directly.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from statistics import mean
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from core.db import session_scope
from core.modelload import resolve_model_path
from core.models import AdapterState, AdapterVersion, Turn, TurnStatus
from core.settings import Settings
from learner import publish_check, regression, standing, versions
from learner.config import TrainConfig
from learner.samples import Collected, add_standing, collect_samples, replay_rollouts
from learner.trainer import Learner, Progress, cached_learner

log = logging.getLogger(__name__)

def get_learner(settings: Settings, config: TrainConfig) -> Learner:
    """The worker's cached learner for this model and config."""
    model_path = resolve_model_path(settings.model, settings.models_dir)
    return cached_learner(model_path, config)


def count_ready(factory: sessionmaker[Session], settings: Settings, config: TrainConfig) -> Collected:
    """The samples a step would use now (stale turns found on the way are marked and committed)."""
    with session_scope(factory) as session:
        return collect_samples(session, settings, config)


def run_train_step(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    config: TrainConfig | None = None,
    force: bool = False,
    reason: str = "",
    progress: Progress | None = None,
) -> AdapterVersion | None:
    """Train one batch into a new adapter version; None when too few samples or another run holds the guard.

    `force` trains on whatever is ready (at least one sample) instead of waiting for a full batch.
    """
    config = config or TrainConfig.from_settings(settings)
    if config.rollback_margin is not None:  # first, so the next version trains from the better parent
        with session_scope(factory) as session:
            regression.roll_back_if_worse(session, margin=config.rollback_margin,
                                          min_turns=config.rollback_min_turns,
                                          labels_override=settings.labels_override)
    collected = count_ready(factory, settings, config)
    if not collected.samples or (len(collected.samples) < config.batch_size and not force):
        log.info("train step skipped: %d of %d samples ready (%d stale dropped)",
                 len(collected.samples), config.batch_size, collected.n_stale)
        return None
    row = versions.acquire(factory, settings, config)
    if row is None:
        log.info("train step skipped: another training run holds the guard")
        return None
    try:
        # collect again under the guard: a run that finished meanwhile may have taken these turns
        collected = count_ready(factory, settings, config)
        if not collected.samples or (len(collected.samples) < config.batch_size and not force):
            versions.release(factory, row.id)
            return None
        return _train(factory, settings, config, row, collected, reason, progress)
    except BaseException as exc:  # release the guard on anything, including a worker time limit
        versions.fail(factory, row.id, f"{type(exc).__name__}: {exc}")
        raise


def _train(
    factory: sessionmaker[Session],
    settings: Settings,
    config: TrainConfig,
    row: AdapterVersion,
    collected: Collected,
    reason: str,
    progress: Progress | None,
) -> AdapterVersion:
    started = time.perf_counter()
    learner = get_learner(settings, config)
    parent_path = None
    with factory() as session:
        parent = session.get(AdapterVersion, row.parent_id) if row.parent_id is not None else None
        parent_path = parent.path if parent else None
        lr = config.version_lr(learner.device, versions.depth(session, row.parent_id, config.decay_depth()))
    learner.sync(parent_path)  # continue from the served adapter
    learner.set_lr(lr)
    replay = None
    with factory() as session:
        add_standing(session, config, collected.samples)
        if config.rollout_replay:
            replay = replay_rollouts(session, config.rollout_replay)
        asked: frozenset[str] = frozenset()
        if config.keep_asked_opening or config.kl_skip_asked:
            asked = frozenset(standing.recurring_openings(session, min_sessions=config.standing_min_sessions,
                                                          window=config.standing_window))
    before = learner.adapter_state() if config.checks_before_publish and config.publish_check_tries > 1 else None
    result = learner.train_batch(collected.samples, progress, replay=replay, asked=asked)
    verdict = _check(factory, learner, config, before)
    path = settings.adapters_dir / row.name
    learner.save(path)
    metrics = _metrics(result.steps, collected, reason, time.perf_counter() - started)
    metrics["lr"] = lr
    if verdict is not None:
        metrics["publish_check"] = verdict.as_json()
    versions.write_files(path, config, metrics)
    with session_scope(factory) as session:
        grew_from = versions.served_ancestor(session, row.parent_id)  # past rejected parents, if any
        parent = session.get(AdapterVersion, grew_from) if grew_from is not None else None
        parent_gone = parent is not None and parent.state == AdapterState.rolled_back
        rejected = verdict if verdict is not None and not verdict.passed else None
        done = versions.finish(session, row.id, path=path, metrics=metrics, n_samples=len(collected.samples),
                               publish=settings.auto_publish and not parent_gone and rejected is None)
        if rejected is not None:
            done.state = AdapterState.rejected
            log.warning("rejected %s: its replies failed %d of %d recent requests, the base model's %d",
                        done.name, rejected.failed, len(rejected.rows), rejected.base_failed)
        for sample, summary in zip(collected.samples, result.per_sample, strict=True):
            turn = session.get(Turn, sample.turn_id)
            if turn is not None:
                turn.status = TurnStatus.trained
                turn.trained_version_id = row.id
                turn.advantage = summary
    log.info("trained %s on %d samples: %s", done.name, len(collected.samples), metrics["summary"])
    return done


def _check(factory: sessionmaker[Session], learner: Learner, config: TrainConfig,
           before: dict[str, Any] | None) -> publish_check.Verdict | None:
    """The publish check on the weights just trained; when they fail and `publish_check_tries` allows,
    again on weights half as far from `before` (the parent's), and so on. The weights left in
    memory, and saved, are the last ones checked."""
    if not config.checks_before_publish:
        return None
    with factory() as session:
        requests = publish_check.latest_requests(session, config.publish_check)
        canary = publish_check.canary_prompts(config.publish_check_canary)
        requests += publish_check.canary_requests(session, learner.tokenizer, canary)
    if not requests:
        return None
    after = learner.adapter_state() if before is not None else None
    scale, tries = 1.0, []
    for attempt in range(config.publish_check_tries):
        if attempt:
            assert before is not None and after is not None
            scale /= 2
            learner.blend(before, after, scale)
        verdict = learner.check_before_publish(requests)
        tries.append({"scale": scale, "failed": verdict.failed})
        if verdict.passed:
            break
    return replace(verdict, scale=scale, tries=tries)


def _metrics(
    steps: list[dict[str, float]], collected: Collected, reason: str, seconds: float
) -> dict[str, Any]:
    summary = {k: mean(s[k] for s in steps) for k in steps[0]} if steps else {}
    summary["clip_frac_last"] = steps[-1]["clip_frac"] if steps else 0.0
    return {
        "steps": steps,
        "summary": summary,
        "n_samples": len(collected.samples),
        "n_rl": sum(s.is_rl for s in collected.samples),
        "n_opd": sum(s.is_opd for s in collected.samples),
        "n_labelled": collected.n_labelled,
        "n_stale_dropped": collected.n_stale,
        "n_unusable": collected.n_unusable,
        "reason": reason,
        "seconds": seconds,
    }
