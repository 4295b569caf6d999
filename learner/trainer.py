"""LoRA policy training on logged turns: RL on judge scores plus on-policy distillation from hints.

The method (one batch):
  - RL: every response token of a scored turn gets advantage A = w_rl * (score - batch mean score).
  - OPD, token mode: a hinted turn's tokens get A += w_opd * clip(teacher - student, -c, c), where
    the teacher is the same model (base or current adapter) shown the prompt plus the hint, scored
    on the same response ids. Top-K mode instead adds w_opd * KL(student || teacher top-K + tail)
    at every response position, which can raise tokens the student never sampled.
  - Teacher rollouts (`rollouts` > 0): the hinted teacher also writes its own reply to each hinted
    prompt, and the student learns it with the hint removed (sequence-level distillation, see
    `learner.rollouts`). This reaches behaviour the student never samples. With
    `rollout_complaints` off, hints that only complain (no instruction) get no rollout; with
    `opd_complaints` off, no token or top-K distillation either (their judge score still counts). With
    `rollout_replay`, the most recently learned rollouts (token ids kept in their turns' advantage
    notes) are learned again with each later batch.
  - Loss: token-level clipped surrogate with ratio pi_theta / pi_behavior, pi_behavior being the
    engine's logged sampling logprob, truncated at a cap; plus an optional k3 KL to the base model
    (the adapter disabled, so the reference costs no memory).

How it departs from the usual PPO/GRPO loop: the policy's own replies come from real traffic, once
each, with no group of rollouts per prompt, and the baseline is the batch mean. The anchors recompute
pi_old with the trainer, so their ratio starts at 1; we use the logged sampling logprobs, so the
ratio also corrects for the adapter version that actually served the turn.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from core.modelload import eos_token_ids, load_model, load_tokenizer, pick_device
from learner import publish_check, rollouts
from learner.config import TrainConfig
from learner.logprobs import Packed, TokenStats, pack, token_stats, topk_of
from learner.losses import (
    clipped_surrogate,
    importance_ratio,
    kl_to_reference,
    opd_token_advantage,
    repeats,
    stutters,
    tail_logprob,
    topk_forward_kl,
    topk_reverse_kl,
    unlikelihood,
)
from learner.samples import (
    HINT_HEADER,
    Sample,
    assistant_texts,
    neutral_prompt_ids,
    opening_request,
    teacher_prompt_ids,
)

log = logging.getLogger(__name__)

Progress = Callable[[int, int, dict[str, float]], None]  # (step, steps, metrics)


@dataclass
class BatchTargets:
    """What stays fixed across the steps on one batch."""

    packed: Packed
    behavior: torch.Tensor  # logged sampling logprobs [n]
    ref: torch.Tensor  # base-model logprobs [n] (adapter disabled)
    advantage: torch.Tensor  # per-token surrogate advantage [n]
    rl_adv: torch.Tensor  # its RL part [n]
    opd_adv: torch.Tensor  # its token-OPD part [n] (zero in topk mode)
    opd_mask: torch.Tensor  # positions of the samples distilled from their hint [n] (bool)
    teacher_ids: torch.Tensor | None = None  # topk mode: [n, K]
    teacher_lps: torch.Tensor | None = None  # topk mode: [n, K]
    rollouts: Packed | None = None  # teacher-written replies after the student's (unhinted) prompts
    rollout_teacher: torch.Tensor | None = None  # the teacher's logprobs on them [n_rollout], for the KL
    rollout_turns: list[int] = field(default_factory=list)  # sample index of each rollout
    # (sample index, text and verdict) of every rollout written, kept or not, for review
    rollout_notes: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    replay: Packed | None = None  # rollouts learned in earlier batches, learned again (rollout_replay)
    repeated: torch.Tensor | None = None  # [n] bools: unlikelihood pushes the token down (`Learner._repeated`)
    anchored: torch.Tensor | None = None  # [n] bools: tokens the KL anchor counts (kl_skip_asked); None: all
    opening_kept: int = 0  # asked-opening tokens whose negative advantage keep_asked_opening zeroed
    opd_gap: torch.Tensor | None = None  # token mode: teacher - student logprob [n], before clip and weight


@dataclass
class BatchResult:
    steps: list[dict[str, float]]
    per_sample: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Rollout:
    """One reply for the student to learn with the hint removed."""

    turn: int  # the sample it answers
    reply: list[int]  # response ids: the kept start (the student's, or the asked phrase), then the teacher's
    own: int  # leading tokens of `reply` the teacher did not write
    prompt: list[int]  # the hinted teacher's prompt
    stop_only: bool = False  # the student's own reply, learned up to where it could have stopped
    spliced_at: int | None = None  # a splice (`rollout_asked_splice`): the asked phrase's length in tokens


class Learner:
    """A LoRA-wrapped copy of the base model, its optimizer and the version its weights came from."""

    def __init__(self, model_path: str, config: TrainConfig) -> None:
        from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

        self.config = config
        self.device = pick_device(config.device)
        # fp32 on CPU: bf16 logprobs are too coarse for ratios near 1 and CPUs gain little from it
        dtype = config.dtype
        if dtype == "auto":
            dtype = "bfloat16" if self.device.startswith("cuda") else "float32"
        self.tokenizer = load_tokenizer(model_path)
        torch.manual_seed(config.seed)
        base = load_model(model_path, device=self.device, dtype=dtype)
        lora = LoraConfig(
            r=config.rank, lora_alpha=config.alpha, lora_dropout=config.dropout,
            target_modules=config.target_modules, task_type="CAUSAL_LM",
        )
        self.model = get_peft_model(base, lora)
        self._fresh = {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.model).items()}
        self.loaded_path: str | None = None  # the version the weights came from
        self._embedder: Any = None  # all-MiniLM-L6-v2, loaded on the first rollout relevance check
        self._replies: publish_check.Replies | None = None  # keeps the base model's check replies
        self._new_optimizer()

    def configure(self, config: TrainConfig) -> None:
        """Use `config` for the next batches; a changed optimiser setting restarts the optimiser."""
        old, self.config = self.config, config
        before = (old.resolved_lr(self.device), old.weight_decay)
        if before != (config.resolved_lr(self.device), config.weight_decay):
            self._new_optimizer()

    def _new_optimizer(self) -> None:
        params = [p for p in self.model.parameters() if p.requires_grad]
        lr = self.config.resolved_lr(self.device)
        self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=self.config.weight_decay)

    def set_lr(self, lr: float) -> None:
        """Train the next batches at `lr` (the optimiser's moments stay)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def sync(self, path: str | None) -> None:
        """Load the adapter saved at `path` (None: a fresh adapter) unless it is loaded already.

        Keyed by path, not version id: ids repeat across databases, paths (unique names) do not.
        """
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        if path == self.loaded_path:
            return
        if path is None:
            state = self._fresh
        else:
            state = load_file(str(Path(path) / "adapter_model.safetensors"), device=self.device)
        set_peft_model_state_dict(self.model, state)
        self.loaded_path = path
        self._new_optimizer()  # moments belong to the weights they were accumulated on

    def save(self, path: Path) -> None:
        """Save the adapter (safetensors); the weights in memory are now that version's."""
        self.model.save_pretrained(str(path), safe_serialization=True)
        self.loaded_path = str(path)

    # --- one batch ---------------------------------------------------------------------------

    def train_batch(self, samples: list[Sample], progress: Progress | None = None,
                    replay: list[tuple[list[int], list[int]]] | None = None,
                    asked: frozenset[str] = frozenset()) -> BatchResult:
        """Run up to `steps_per_batch` optimizer steps on `samples` (and on the `replay` rollouts: (prompt
        ids, rollout ids) learned in earlier batches), stopping at a step whose gradient is zero or not
        finite (no step is taken then); returns per-step metrics. `asked`: openings the deployment's
        users keep asking for (`standing.recurring_openings`), which keep_asked_opening and kl_skip_asked
        treat as they treat those the batch's hints ask for."""
        cfg = self.config
        targets = self._targets(samples, asked)
        if replay:
            targets.replay = pack([p for p, _ in replay], [r for _, r in replay], self.device)
        self.model.train()
        steps = []
        for step in range(cfg.steps_per_batch):
            metrics = self._step(targets)
            steps.append(metrics)
            log.info("step %d/%d loss %.4f clip %.1f%% kl %.4f entropy %.3f grad %.3f %.0f tok/s",
                     step + 1, cfg.steps_per_batch, metrics["loss"], 100 * metrics["clip_frac"], metrics["kl"],
                     metrics["entropy"], metrics["grad_norm"], metrics["tokens_per_s"])
            if progress is not None:
                progress(step + 1, cfg.steps_per_batch, metrics)
            if not _steps_on(metrics["grad_norm"]):
                break  # no step was taken (see _step), so the next one would be the same
        self.model.eval()
        return BatchResult(steps=steps, per_sample=_summaries(samples, targets))

    @torch.no_grad()
    def _targets(self, samples: list[Sample], asked: frozenset[str] = frozenset()) -> BatchTargets:
        cfg = self.config
        self.model.eval()
        packed = pack([s.prompt_ids for s in samples], [s.response_ids for s in samples], self.device)
        student = token_stats(self.model, packed, chunk=cfg.logprob_chunk).logprobs
        with self.model.disable_adapter():
            ref = token_stats(self.model, packed, chunk=cfg.logprob_chunk).logprobs
        rl_scores = [s.score for s in samples if s.is_rl]
        baseline = sum(rl_scores) / len(rl_scores) if (cfg.baseline and rl_scores) else 0.0
        per_token = [torch.full((len(s.response_ids),), float(s.score - baseline if s.is_rl else 0.0))
                     for s in samples]
        rl_adv = cfg.w_rl * torch.cat(per_token).to(self.device)
        hinted = [i for i, s in enumerate(samples) if s.is_opd]
        distilled = [i for i in hinted if cfg.opd_complaints or samples[i].says_what_to_do]
        opd_mask = torch.cat([torch.full((len(s.response_ids),), i in distilled)
                              for i, s in enumerate(samples)]).to(self.device)
        opd_adv = torch.zeros_like(rl_adv)
        out = BatchTargets(packed, _tensor(samples, self.device), ref, rl_adv, rl_adv, opd_adv, opd_mask)
        if distilled:
            self._teacher(samples, distilled, student, out)
        if hinted and cfg.rollouts:
            self._rollouts(samples, hinted, out)
        if cfg.unlikelihood_ngram or cfg.unlikelihood_stutter:
            again = torch.cat([self._repeated(s.response_ids) for s in samples]).to(self.device)
            out.repeated = again if again.any() else None
        skip_kl = bool(cfg.kl_coef and cfg.kl_skip_asked)
        spans = self._opening_spans(samples, asked) if skip_kl or cfg.keep_asked_opening else None
        if skip_kl and spans is not None:
            out.anchored = ~self._mask(samples, spans)
        out.advantage = out.rl_adv + out.opd_adv
        if cfg.keep_asked_opening and spans is not None:
            pushed_down = self._mask(samples, self._followed(samples, spans)) & (out.advantage < 0)
            out.opening_kept = int(pushed_down.sum())
            out.advantage = torch.where(pushed_down, torch.zeros_like(out.advantage), out.advantage)
        return out

    def _repeated(self, ids: list[int]) -> torch.Tensor:
        """[len(ids)] bools: the reply tokens the unlikelihood loss pushes down (unlikelihood_ngram's repeats,
        unlikelihood_stutter's stutters)."""
        cfg = self.config
        out = torch.zeros(len(ids), dtype=torch.bool)
        if cfg.unlikelihood_ngram:
            out |= repeats(ids, cfg.unlikelihood_ngram)
        if cfg.unlikelihood_stutter:
            out |= stutters(self.tokenizer.batch_decode([[i] for i in ids]),
                            restart_only=cfg.unlikelihood_stutter_marks == "restart")
        return out

    def _opening_spans(self, samples: list[Sample], also: frozenset[str]) -> list[int] | None:
        """Per reply, how many leading tokens spell a phrase one of the batch's hints asks replies to begin
        with (Begin your reply with 'My advice:'), or one of `also`, with the punctuation after it on its
        line (0: none); None when no such phrase is known. The marks on the lines below the phrase are not
        part of it: "My advice:" over empty list marks is a failure."""
        phrases = set(also).union(*(rollouts.asked_openings(s.teacher_hint) for s in samples if s.hint))
        if not phrases:
            return None
        return [rollouts.phrase_span(s.response_ids, phrases, self.tokenizer.decode, same_line=True)
                for s in samples]

    def _followed(self, samples: list[Sample], spans: list[int]) -> list[int]:
        """`spans` with 0 for a reply that says no word after its opening (the label alone)."""
        return [k if any(c.isalnum() for c in self.tokenizer.decode(s.response_ids[k:], skip_special_tokens=True))
                else 0 for s, k in zip(samples, spans, strict=True)]

    def _mask(self, samples: list[Sample], spans: list[int]) -> torch.Tensor:
        """[n] bools: each reply's first `spans[i]` tokens."""
        return torch.cat([torch.arange(len(s.response_ids)) < k
                          for s, k in zip(samples, spans, strict=True)]).to(self.device)

    def _teacher(
        self, samples: list[Sample], hinted: list[int], student: torch.Tensor, out: BatchTargets
    ) -> None:
        """Fill the distillation targets: the hinted context scored on the same response ids."""
        cfg = self.config
        t_packed = pack([teacher_prompt_ids(self.tokenizer, samples[i]) for i in hinted],
                        [samples[i].response_ids for i in hinted], self.device)
        starts = [sum(out.packed.lengths[:i]) for i in range(len(samples))]
        positions = torch.cat([torch.arange(starts[i], starts[i] + out.packed.lengths[i]) for i in hinted])
        positions = positions.to(self.device)
        with _teacher_weights(self.model, cfg.teacher):
            if cfg.opd_mode == "token":
                teacher = token_stats(self.model, t_packed, chunk=cfg.logprob_chunk).logprobs
                gap = teacher - student[positions]
                out.opd_gap = torch.zeros_like(out.opd_adv).index_put((positions,), gap)
                adv = opd_token_advantage(gap, cfg.opd_clip, cfg.opd_floor)
                if cfg.opd_no_repeat:  # the teacher's vote for saying a phrase again does not count
                    again = torch.cat([repeats(samples[i].response_ids, cfg.opd_no_repeat) for i in hinted])
                    adv = torch.where(again.to(adv.device), adv.clamp(max=0), adv)
                out.opd_adv = out.opd_adv.index_put((positions,), cfg.w_opd * adv)
            else:
                ids, lps, _ = topk_of(self.model, t_packed, cfg.top_k, chunk=cfg.logprob_chunk)
                n = len(out.packed.targets)
                out.teacher_ids = torch.zeros((n, cfg.top_k), dtype=ids.dtype, device=self.device)
                out.teacher_lps = torch.zeros((n, cfg.top_k), dtype=lps.dtype, device=self.device)
                out.teacher_ids[positions] = ids
                out.teacher_lps[positions] = lps

    def _rollouts(self, samples: list[Sample], hinted: list[int], out: BatchTargets) -> None:
        """Let the hinted teacher answer each hinted prompt itself; keep the replies worth learning."""
        cfg = self.config
        if not cfg.rollout_complaints:  # a bare complaint mostly gets said back by a small teacher
            hinted = [i for i in hinted if samples[i].says_what_to_do]
            if not hinted:
                return
        eos = eos_token_ids(self.model, self.tokenizer)
        asked = self._asked_prefixes(samples, hinted) if cfg.rollout_open_as_asked else {}
        found = self._written(samples, hinted, asked, eos)
        if not found:
            return
        turns, replies, own = [r.turn for r in found], [r.reply for r in found], [r.own for r in found]
        with _teacher_weights(self.model, cfg.teacher):
            teacher = rollouts.scored(self.model, [r.prompt for r in found], replies, device=self.device,
                                      chunk=cfg.logprob_chunk)
        student = rollouts.scored(self.model, [samples[i].prompt_ids for i in turns], replies,
                                  device=self.device, chunk=cfg.logprob_chunk)
        # the gain is read on what the hint added: the teacher's part, or a splice's label (rollout_splice_gain)
        added = [slice(0, r.spliced_at) if r.spliced_at is not None and cfg.rollout_splice_gain == "label"
                 else slice(r.own, None) for r in found]
        gained = rollouts.gains([t[part] for t, part in zip(teacher, added, strict=True)],
                                [s[part] for s, part in zip(student, added, strict=True)])
        texts = [self.tokenizer.decode(reply, skip_special_tokens=True) for reply in replies]
        grounded: list[float | None] = [None] * len(turns)
        if cfg.rollout_grounding_tokens:  # checked after the phrase the hint asks to open with, if any
            starts = [rollouts.asked_opening(reply, samples[i].teacher_hint, self.tokenizer.decode)
                      for reply, i in zip(replies, turns, strict=True)]
            openings = [reply[:n + cfg.rollout_grounding_tokens] for reply, n in zip(replies, starts, strict=True)]
            neutral = rollouts.scored(self.model, [neutral_prompt_ids(self.tokenizer, samples[i]) for i in turns],
                                      openings, device=self.device, chunk=cfg.logprob_chunk)
            grounded = list(rollouts.opening_grounding(student, neutral, cfg.rollout_grounding_tokens, starts))
        related: list[float | None] = [None] * len(turns)
        if cfg.rollout_min_relevance > 0:
            related = rollouts.relevance(self._sentence_embedder(), texts,
                                         [opening_request(samples[i].messages) for i in turns])
        verdicts: dict[int, list[tuple[int, rollouts.Verdict]]] = {}  # by sample index: (rollout, verdict)
        for j, (i, gain) in enumerate(zip(turns, gained, strict=True)):
            verdict = rollouts.screen(
                texts[j], hint=samples[i].teacher_hint, earlier=assistant_texts(samples[i].messages), gain=gain,
                min_gain=cfg.min_gain(turns[j] in asked), max_echo=cfg.rollout_max_echo, max_copy=cfg.rollout_max_copy,
                relevance=related[j], min_relevance=cfg.rollout_min_relevance,
                grounding=grounded[j], min_grounding=cfg.rollout_min_grounding, header=HINT_HEADER.strip(),
                max_repeat=cfg.rollout_max_repeat, asked_opening=cfg.rollout_asked_opening,
                asked_once=cfg.rollout_asked_once,
                finished=replies[j][-1] in eos if cfg.rollout_drop_cut else None,
                hollow_lists=cfg.rollout_no_hollow_lists,
                # the loop check reads the whole reply where a stop in the student's part is all the teacher wrote
                written=(self.tokenizer.decode(replies[j][own[j]:], skip_special_tokens=True) if own[j] and not (
                    cfg.rollout_stop_in_reply and own[j] == len(replies[j]) - 1) else None))
            verdicts.setdefault(i, []).append((j, verdict))
        kept: list[int] = []  # rollout positions
        for i, group in verdicts.items():
            best = rollouts.pick_best([v for _, v in group]) if cfg.rollout_pick == "best" else None
            for n, (j, verdict) in enumerate(group):
                learned = verdict.kept and (cfg.rollout_pick == "all" or n == best)
                out.rollout_notes.append((i, {"text": texts[j], **{
                    f: round(v, 3) if isinstance(v, float) else v for f, v in asdict(verdict).items()},
                    "learned": learned, "kept_from": own[j], "asked_prefix": turns[j] in asked,
                    "spliced": found[j].spliced_at is not None,
                    **({"ids": replies[j]} if learned else {})}))
                if learned:
                    kept.append(j)
        # the asked phrase alone, for a turn whose every rollout written after it was refused
        taught = {turns[j] for j in kept}
        alone = [(i, group[0][0]) for i, group in verdicts.items()
                 if cfg.rollout_asked_phrase and i in asked and i not in taught]
        for i, _ in alone:
            out.rollout_notes.append((i, {"text": self.tokenizer.decode(asked[i]), "learned": True,
                                          "phrase_only": True, "kept_from": 0, "asked_prefix": True,
                                          "ids": asked[i]}))
        if not kept and not alone:
            return
        out.rollout_teacher = torch.cat([teacher[j] for j in kept] + [teacher[j][:len(asked[i])] for i, j in alone])
        out.rollout_turns = [turns[j] for j in kept] + [i for i, _ in alone]
        out.rollouts = pack([samples[i].prompt_ids for i in out.rollout_turns],
                            [replies[j] for j in kept] + [asked[i] for i, _ in alone], self.device)

    def _written(self, samples: list[Sample], hinted: list[int], asked: dict[int, list[int]],
                 eos: list[int]) -> list[_Rollout]:
        """The hinted teacher's rollouts: each continues the student's reply where the hint first asks
        for something else (`rollout_from`), or the phrase the hint asks to open with, trimmed to a
        place to stop (`rollout_trim`). With `rollout_stop_in_reply`, a reply that ran out where the
        hint asks for nothing else is also one, learned up to where it could have stopped."""
        cfg = self.config
        budget = {i: min(cfg.rollout_max_tokens, samples[i].max_new_tokens or cfg.rollout_max_tokens) for i in hinted}
        kept_from = {i: 0 for i in hinted}  # reply tokens of the student's each rollout starts with
        own_start = [i for i in hinted if i not in asked]  # an asked phrase replaces the student's start
        if cfg.rollout_from == "divergence" and own_start:
            kept_from |= self._divergences(samples, own_start, set(eos))
        begun = {i: samples[i].response_ids[:kept_from[i]] for i in hinted} | asked  # what each rollout continues
        spliced = self._spliced(samples, asked, eos) if cfg.rollout_asked_splice else {}
        stop_only = [i for i in hinted if cfg.rollout_stop_in_reply and i not in asked and samples[i].response_ids
                     and kept_from[i] == len(samples[i].response_ids) and samples[i].response_ids[-1] not in eos]
        order = [i for i in hinted if i not in spliced and len(begun[i]) < budget[i]
                 and (i in asked or kept_from[i] < len(samples[i].response_ids)) for _ in range(cfg.rollouts)]
        prompts = {i: teacher_prompt_ids(self.tokenizer, samples[i]) for i in {*order, *stop_only, *spliced}}
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos[0]
        with _teacher_weights(self.model, cfg.teacher):
            written = rollouts.generate(self.model, [prompts[i] + begun[i] for i in order],
                                        [budget[i] - len(begun[i]) for i in order], eos_ids=eos, pad_id=pad,
                                        temperature=cfg.rollout_temperature, device=self.device,
                                        no_repeat=cfg.rollout_no_repeat) if order else []
        found = [_Rollout(i, begun[i] + reply, len(begun[i]), prompts[i])
                 for i, reply in zip(order, written, strict=True) if reply]
        found += [_Rollout(i, samples[i].response_ids, len(samples[i].response_ids), prompts[i], stop_only=True)
                  for i in stop_only]
        found += [_Rollout(i, ids, 0, prompts[i], spliced_at=len(asked[i])) for i, ids in spliced.items()]
        for r in found if cfg.rollout_trim else []:
            # with rollout_stop_in_reply a stop may fall in the student's part, never in an asked phrase
            start = r.own if r.turn in asked or not cfg.rollout_stop_in_reply else 0
            r.reply = rollouts.trim_to_sentence(
                r.reply, start=r.spliced_at if r.spliced_at is not None else start,
                decode=self.tokenizer.decode, eos_ids=eos, list_items=cfg.rollout_trim_lists,
                limit=None if cfg.rollout_trim_share == 1
                else int(cfg.rollout_trim_share * max(budget[r.turn], len(r.reply))),
                finished_too=cfg.rollout_trim_finished)
            r.own = min(r.own, len(r.reply) - 1)  # a stop is the teacher's
        # a stop-only rollout with no place to stop in it holds nothing the teacher wrote
        return [r for r in found if not r.stop_only or r.reply[-1] in eos]

    def _spliced(self, samples: list[Sample], asked: dict[int, list[int]],
                 eos: list[int]) -> dict[int, list[int]]:
        """Per sample whose reply does not open with the label its hint asks for (`asked`), the splice
        (`rollout_asked_splice`): that label and then the student's own reply, as ids (with the reply's own
        stop if it stopped). A phrase `rollouts.spliced_text` refuses gets none, and so does a splice whose
        tokens do not begin with the label's own: the gain and the trim count the label by its tokens."""
        out = {}
        for i, phrase in asked.items():
            reply = samples[i].response_ids
            text = rollouts.spliced_text(self.tokenizer.decode(phrase),
                                         self.tokenizer.decode(reply, skip_special_tokens=True))
            if text is not None:
                ids = self.tokenizer.encode(text, add_special_tokens=False)
                if ids[:len(phrase)] == phrase:
                    out[i] = ids + [reply[-1]] if reply and reply[-1] in eos else ids
        return out

    def _asked_prefixes(self, samples: list[Sample], hinted: list[int]) -> dict[int, list[int]]:
        """The phrase each hinted sample's hint asks a reply to begin with, as token ids, for the samples
        whose reply does not already open with it (`rollout_open_as_asked`)."""
        out = {}
        for i in hinted:
            hint = samples[i].teacher_hint
            phrase = rollouts.asked_opening_text(hint)
            reply = self.tokenizer.decode(samples[i].response_ids, skip_special_tokens=True)
            if phrase is not None and not rollouts.opens_as_asked(reply, hint):
                out[i] = self.tokenizer.encode(phrase, add_special_tokens=False)
        return out

    @torch.no_grad()
    def _divergences(self, samples: list[Sample], hinted: list[int], eos: set[int]) -> dict[int, int]:
        """Per hinted sample, how many of its reply tokens come before the first one where the hint asks
        for something else (`rollouts.divergence`: the teacher's weights with the hint against without)."""
        cfg = self.config
        replies = [samples[i].response_ids for i in hinted]
        with_hint = pack([teacher_prompt_ids(self.tokenizer, samples[i]) for i in hinted], replies, self.device)
        without = pack([samples[i].prompt_ids for i in hinted], replies, self.device)
        with _teacher_weights(self.model, cfg.teacher):
            top, top_with, hinted_lps = topk_of(self.model, with_hint, 1, chunk=cfg.logprob_chunk)
            plain = token_stats(self.model, without, chunk=cfg.logprob_chunk, extra_ids=top)
        assert plain.extra_logprobs is not None
        rival = torch.where(top[:, 0] == with_hint.targets, -torch.inf, (top_with - plain.extra_logprobs)[:, 0])
        out = {}
        for i, reply, effect, rival_i, lps in zip(hinted, replies, with_hint.split(hinted_lps - plain.logprobs),
                                                  with_hint.split(rival), with_hint.split(hinted_lps), strict=True):
            stop = float(lps[-1]) if reply[-1] in eos else None
            out[i] = rollouts.divergence(effect, rival_i, margin=cfg.rollout_divergence_margin, stop_logprob=stop,
                                         stop_floor=cfg.rollout_stop_floor)
        return out

    def _stop_weights(self, packed: Packed) -> torch.Tensor | float:
        weight = self.config.rollout_stop_weight
        return 1.0 if weight == 1 else rollouts.stop_weights(
            packed, set(eos_token_ids(self.model, self.tokenizer)), weight)

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """A copy of the LoRA weights in memory."""
        from peft import get_peft_model_state_dict

        return {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.model).items()}

    def blend(self, start: dict[str, torch.Tensor], end: dict[str, torch.Tensor], scale: float) -> None:
        """Set the LoRA weights `scale` of the way from `start` to `end`; the optimiser restarts, its
        moments belonging to the weights it stepped."""
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.model, {k: start[k] + scale * (end[k] - start[k]) for k in end})
        self._new_optimizer()

    def check_before_publish(self, requests: list[publish_check.Request]) -> publish_check.Verdict:
        """The weights in memory against the base model on `requests` (learner/publish_check.py)."""
        cfg = self.config
        if self._replies is None or self._replies.max_new_tokens != cfg.publish_check_tokens:
            self._replies = publish_check.Replies(
                self.model, self.tokenizer, self._sentence_embedder(), device=self.device,
                eos_ids=eos_token_ids(self.model, self.tokenizer), max_new_tokens=cfg.publish_check_tokens)
        new, base = self._replies.of_adapter(requests), self._replies.of_base(requests)
        return publish_check.decide(new, base, max_repeat=cfg.publish_check_max_repeat,
                                    drop=cfg.publish_check_drop, slack=cfg.publish_check_slack, requests=requests)

    def _sentence_embedder(self) -> Any:
        if self._embedder is None:
            from core.embeddings import SentenceEmbedder

            self._embedder = SentenceEmbedder(max_length=256)
        return self._embedder

    def _step(self, t: BatchTargets) -> dict[str, float]:
        cfg = self.config
        start = time.perf_counter()
        stats: TokenStats = token_stats(
            self.model, t.packed, chunk=cfg.logprob_chunk, extra_ids=t.teacher_ids
        )
        ratio = importance_ratio(stats.logprobs, t.behavior, cfg.ratio_cap)
        surrogate, clipped = clipped_surrogate(ratio, t.advantage, cfg.eps_low, cfg.eps_high)
        kl = kl_to_reference(stats.logprobs, t.ref)
        anchored = kl if t.anchored is None else kl[t.anchored]
        loss = surrogate.mean() + cfg.kl_coef * (anchored.mean() if anchored.numel() else kl.sum() * 0)
        topk_kl = torch.zeros(())
        if t.teacher_lps is not None and stats.extra_logprobs is not None and stats.extra_tail is not None:
            divergence = topk_forward_kl if cfg.topk_direction == "forward" else topk_reverse_kl
            per_pos = divergence(stats.extra_logprobs, stats.extra_tail, t.teacher_lps,
                                 tail_logprob(t.teacher_lps))
            topk_kl = per_pos[t.opd_mask].mean()
            loss = loss + cfg.w_opd * topk_kl
        rollout, rollout_kl = torch.zeros(()), torch.zeros(())
        if t.rollouts is not None and t.rollout_teacher is not None:
            on_rollouts = token_stats(self.model, t.rollouts, chunk=cfg.logprob_chunk).logprobs
            rollout = (rollouts.rollout_loss(on_rollouts) * self._stop_weights(t.rollouts)).mean()
            rollout_kl = (t.rollout_teacher - on_rollouts.detach()).mean()  # estimates KL(teacher || student)
            loss = loss + cfg.w_rollout * rollout
        replayed = torch.zeros(())
        if t.replay is not None:
            on_replay = token_stats(self.model, t.replay, chunk=cfg.logprob_chunk).logprobs
            replayed = (rollouts.rollout_loss(on_replay) * self._stop_weights(t.replay)).mean()
            loss = loss + cfg.w_rollout * replayed
        unlikely = torch.zeros(())
        if t.repeated is not None:
            # over all response tokens, so a loop weighs by how much of the batch it fills
            unlikely = unlikelihood(stats.logprobs[t.repeated]).sum() / len(t.repeated)
            loss = loss + cfg.w_unlikelihood * unlikely
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in self.model.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        norm = float(grad_norm)
        if _steps_on(norm):
            self.optimizer.step()
        elif not math.isfinite(norm):
            log.warning("gradient norm %s: this batch's steps are skipped", norm)
        elapsed = time.perf_counter() - start
        active = t.advantage != 0
        return {
            "loss": float(loss.detach()),
            "entropy": float(stats.entropy.mean()),
            "clip_frac": float(clipped[active].float().mean()) if active.any() else 0.0,
            "kl": float(kl.detach().mean()),
            "kl_anchored_tokens": int(anchored.numel()),
            "opening_kept_tokens": t.opening_kept,
            "topk_kl": float(topk_kl.detach()),
            "rollout_loss": float(rollout.detach()),
            "rollout_kl": float(rollout_kl),
            "rollout_tokens": int(t.rollouts.targets.shape[0]) if t.rollouts is not None else 0,
            "replay_loss": float(replayed.detach()),
            "replay_tokens": int(t.replay.targets.shape[0]) if t.replay is not None else 0,
            "unlikelihood": float(unlikely.detach()),
            "repeated_tokens": int(t.repeated.sum()) if t.repeated is not None else 0,
            "ratio_mean": float(ratio.detach().mean()),
            "ratio_max": float(ratio.detach().max()),
            "grad_norm": float(grad_norm),
            "lr": float(self.optimizer.param_groups[0]["lr"]),  # the rate this step was taken at
            "tokens": int(t.packed.input_ids.shape[1]),
            "response_tokens": int(t.packed.targets.shape[0]),
            "tokens_per_s": t.packed.input_ids.shape[1] / elapsed,
            "seconds": elapsed,
        }


def _steps_on(grad_norm: float) -> bool:
    """Whether an optimizer step is taken on a gradient of this norm: not on a non-finite one, nor on a
    zero one. A batch with no signal (every RL score the same under the baseline, nothing distilled, no
    rollout; kl_coef 0, the default) has a zero gradient, and an AdamW step on it still moves the weights
    by the moments of the batches before: four such steps go about as far as three more steps of the
    last batch with signal (beta1 0.9: 0.9 + 0.81 + 0.73 + 0.66), so a run of empty batches kept learning
    that batch's rollouts over and over."""
    return grad_norm > 0.0 and math.isfinite(grad_norm)


def _tensor(samples: list[Sample], device: str) -> torch.Tensor:
    return torch.tensor([lp for s in samples for lp in s.behavior_logprobs], device=device)


def _teacher_weights(model: Any, teacher: str) -> AbstractContextManager[Any]:
    """The base model (adapter disabled) or the current adapter, as the teacher."""
    return model.disable_adapter() if teacher == "base" else nullcontext()


def _summaries(samples: list[Sample], t: BatchTargets) -> list[dict[str, Any]]:
    """What each turn contributed, stored on `Turn.advantage`."""
    rl = t.packed.split(t.rl_adv.cpu())
    opd = t.packed.split(t.opd_adv.cpu())
    distilled = [bool(m.any()) for m in t.packed.split(t.opd_mask.cpu())]
    rollout_tokens = [0] * len(samples)
    if t.rollouts is not None:
        for i, n in zip(t.rollout_turns, t.rollouts.lengths, strict=True):
            rollout_tokens[i] += n
    notes: list[list[dict[str, Any]]] = [[] for _ in samples]
    for i, note in t.rollout_notes:
        notes[i].append(note)
    gaps = t.packed.split(t.opd_gap.cpu()) if t.opd_gap is not None else [None] * len(samples)
    out = []
    for s, r, o, d, n, written, g in zip(samples, rl, opd, distilled, rollout_tokens, notes, gaps, strict=True):
        row = {"rl": round(float(r.mean()), 4), "opd": round(float(o.mean()), 4), "n_tokens": len(s.response_ids),
               "score": s.score, "hinted": s.is_opd, "source": s.source, "hint_source": s.hint_source,
               "distilled": d, "rollout_tokens": n}
        if g is not None and d:  # how far the teacher sits from the student, before opd_clip and opd_floor
            row["opd_gap"] = round(float(g.mean()), 4)
        if s.standing:
            row["standing"] = list(s.standing)
        if written:  # what the hinted teacher wrote, so a reviewer sees what the student was (not) taught
            row["rollouts"] = written
        out.append(row)
    return out


SHAPE_FIELDS = ("rank", "alpha", "dropout", "target_modules", "device", "dtype", "seed")


@lru_cache(maxsize=1)
def _cached(model_path: str, shape_json: str) -> Learner:
    return Learner(model_path, TrainConfig.from_json(json.loads(shape_json)))


def cached_learner(model_path: str, config: TrainConfig) -> Learner:
    """One learner per worker process: loading the model costs more than a step on small batches.

    Keyed by the model and the fields that shape the weights; other fields (lr, loss settings)
    are applied to the cached learner, so changing them does not reload the model.
    """
    shape = {k: getattr(config, k) for k in SHAPE_FIELDS}
    learner = _cached(model_path, json.dumps(shape, sort_keys=True))
    learner.configure(config)
    return learner
