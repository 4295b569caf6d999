"""Training hyperparameters: one dataclass, saved as `config.json` next to every adapter version.

Runtime settings (paths, broker, method, batch size) stay in `core.settings.Settings`; this holds
what shaped the weights. `TrainConfig.from_settings` fills the settings-owned fields and reads
optional overrides from `DATA_DIR/train_config.json`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from core.settings import Settings

# lr on CPU (SmolLM2-135M, LoRA r=16, 8 samples x 2 steps per version): at 1e-4 the second step
# clipped 1-4% of tokens and two versions left greedy replies word for word the same; at 3e-4 it
# clips 11-16% and replies move after one version. Larger rates clipped 30-65% in the learner's
# own experiments. GPU-sized models use the usual 1e-5.
CPU_LR = 3e-4
GPU_LR = 1e-5


def _f(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass
class TrainConfig:
    """What one training run used. Every field carries `help`; `__post_init__` checks the values."""

    method: Literal["rl", "opd", "combined"] = _f("combined", "rl: judge scores; opd: hints; combined: both.")
    batch_size: int = _f(8, "Samples per training batch (from settings.train_batch_size).")
    steps_per_batch: int = _f(2, "Optimizer steps taken on each batch (more steps: more clipping).")
    # --- LoRA --------------------------------------------------------------------------------
    rank: int = _f(16, "LoRA rank.")
    alpha: int = _f(32, "LoRA alpha (scale = alpha / rank).")
    dropout: float = _f(0.0, "LoRA dropout; 0 keeps behaviour and training logprobs comparable.")
    target_modules: str | list[str] = _f("all-linear", "PEFT target modules; all-linear = every projection.")
    # --- optimiser ---------------------------------------------------------------------------
    lr: float | None = _f(None, f"Learning rate; None picks {GPU_LR} on CUDA and {CPU_LR} on CPU.")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    lr_decay: float = _f(
        1.0, "Each version trains at lr x lr_decay^d, never under lr x lr_floor, d the number of versions in its "
        "parent chain (the parent and each one above it; rolled-back and rejected ones count, as their "
        "weights are in the chain): a young adapter learns at the full rate, a mature one moves less per "
        "batch. 1 keeps the rate. At 0.85 on the "
        "anchored advice/bottomline config (seeds 0, 1) advice ended at 0.25 on both (guard 0.58, 0.75; "
        "without decay +0.61 over three runs), its guard lost while the label was learned; bottomline kept "
        "its guard (1.00, 0.92) but learned late on seed 1 (0.33).")
    lr_floor: float = _f(0.1, "The share of lr that lr_decay never goes under: a long-lived adapter keeps learning.")
    max_grad_norm: float = _f(1.0, "Gradient norm clip.")
    # --- loss --------------------------------------------------------------------------------
    eps_low: float = _f(0.2, "Clip range below 1 for the importance ratio.")
    eps_high: float = _f(0.28, "Clip range above 1 (wider: low-probability tokens can still rise).")
    ratio_cap: float = _f(2.0, "Truncation of pi_theta / pi_behavior (the logged sampling logprob).")
    kl_coef: float = _f(
        0.0, "Weight of the KL to the base model (adapter disabled): the k3 estimate on the batch's sampled "
        "reply tokens (`losses.kl_to_reference`), mean over them; it does not reach the rollout loss. 0 only "
        "logs it. On the advice user with unlikelihood 4-grams at weight 0.5 (share 0.5), 0.1 kept the "
        "per-step estimate under 0.5 and advice ended at 0.67 and 0.83 (seeds 1, 0); without it the estimate "
        "reached 19,432 and every final reply was the label and a stop (seed 1, 0.00); at 0.2 advice ended "
        "at 0.17, half its replies a stock line in place of the label (seed 1); at 0.05 at 0.00, the label and "
        "a stop (seed 1). A rerun of seed 1 at 0.1 ended at 0.33: reruns of one seed differ by up to 0.34, "
        "since training runs beside the server and timing picks which version serves which turn.")
    kl_skip_asked: bool = _f(
        False, "The KL anchor leaves out each sampled reply's opening where it spells a phrase users asked "
        "replies to begin with in a hint of the same batch or in a recurring instruction (see below), as in "
        "Begin your reply with 'My advice:', with the punctuation after it on its line: "
        "the base model never writes that phrase, so counted it pulls the learned opening back, and the anchor "
        "then holds only what follows it. Phrases come from the batch's own hints and, as for "
        "keep_asked_opening, from the deployment's recurring instructions: once a user is satisfied the "
        "batches carry no hint. On bottomline (seed 1, keep_asked_opening on) the batches of v4-v7 were all "
        "+1 with no hint and every reply opening 'In short,', so the batch-mean baseline left RL nothing and "
        "the anchor was the one steady pull: held-out went 1.00 (v4), 0.83, 0.92, 0.58 (v7). Until e3f83d4 "
        "only the batch's hints counted. Tried once at kl_coef 0.2 (advice, seed 1, when the list marks on the "
        "lines below were left out too): the skip left out 0 to 51 of 134 to 490 reply tokens a step (the "
        "run's step metrics), and advice still fell, to guard 0.08 at v4-v5 and 0.00 (guard "
        "0.50) at the end, most replies the label over empty list marks or a stock line.")
    keep_asked_opening: bool = _f(
        False, "On each sampled reply that opens with a phrase users asked replies to begin with (with the "
        "punctuation after it on its line), no token of that opening gets a negative advantage: a -1 score "
        "(judge or label), or in token OPD a hinted teacher that writes the phrase less readily than the "
        "student has learned to, counts against what followed the opening, not against the opening the user "
        "asked for. A reply that says no word after the opening (the label alone) is left as it is: spared, "
        "its whole -1 would fall on the stop after the label. (That exception came after a run on advice, "
        "seed 0, where five of v4's batch were the label alone and every held-out reply of v6 and v7 ran "
        "until the token budget cut it; with the exception the same seed's replies ran long from v4 on, "
        "before any opening had been spared, so the spared stops were not the cause.) "
        "It is the opening's summed RL and token-OPD advantage that is raised to 0, so a teacher's "
        "push up there is lost where the -1 outweighs it; positive sums stay. Top-k OPD's KL still covers the "
        "opening. The phrases are those the batch's hints ask for and those the deployment's recurring "
        "instructions ask for (learner/standing.py: given in at least standing_min_sessions sessions among "
        "the latest standing_window instruction-hinted turns, read in each group's commonest phrasing), since "
        "the late corrections of a learned preference ('This has nothing to do with what I asked.') no longer "
        "say it. Phrases apply to every reply of the batch. The KL anchor is kl_skip_asked's to leave out.")
    w_rl: float = _f(
        1.0, "Weight of the RL advantage. In combined mode it sets RL against distillation; in rl mode "
        "with kl_coef 0 it only scales the loss, which AdamW mostly normalises away (the gradient clip bites "
        "less often).")
    w_opd: float = _f(1.0, "Weight of the distillation advantage (token) or loss (topk).")
    unlikelihood_ngram: int = _f(
        0, "Unlikelihood on repeats: every sampled reply's tokens inside a token n-gram of this length that "
        "already occurred in that reply (`losses.repeats`) get the loss -log(1 - p), whatever the reply's "
        "score. An advice run (share 0.5, seed 1) ended with every side reply saying its label over and over "
        "('My advice:\n\nMy advice:\n\n...', 23 of 24 cut at v5-v7); the user scores such a reply -1, but when "
        "the whole batch is -1 the batch-mean baseline leaves RL nothing to push with. Tried once on that seed "
        "(4, weight 2): advice read 0.67 at v4-v5, then every reply was the label and a stop (0.00 at the end): "
        "it says what not to write, not what to write instead, and what the student wrote instead was the stop; "
        "the learner's per-step KL estimate to the base went from under 1 to 132 by v7 (other runs: at most 3). "
        "At weight 0.5 the same seed went the same way (0.67 at v5, the label alone at the end); with kl_coef "
        "0.1 as well it held to the end on two seeds (see kl_coef). The anchor without it (kl_coef 0.1, seed 1) "
        "ended with nearly every reply the label said again and again (0.00), so the two work together. 0: off.")
    unlikelihood_stutter: bool = _f(
        False, "Unlikelihood on stutters, with or without unlikelihood_ngram and at w_unlikelihood: in every "
        "sampled reply, whatever its score, a phrase of two words or more said again right away "
        "(`losses.stutters`: 'My advice:My advice:', 'In short, in short,'; case, spacing, line breaks, "
        "markdown marks and quotes aside; not inside code fences) has its second saying pushed down. Token "
        "4-grams miss a doubled three-token label: in the first label-gain splice runs (advice, seed 1) the "
        "side replies that said the label twice went from 0 of 12 at v3 to 12 of 12 at v7, and v7 read 0.42 "
        "(guard 0.42) after 1.00 at v5. The simulated user is satisfied by 'My advice:My advice:The art of "
        "...', so its replies give RL no reason to drop the stutter. On the label-gain splice config (advice and "
        "bottomline) seed 1 then ended at +1.00 with guard 1.00 on both users (without: +0.50 and +1.00), seed "
        "0 at +0.50 with guards 0.75 and 0.67 (without: 0.50 and 0.50, guards 1.00 and 0.92); one run each.")
    unlikelihood_stutter_marks: Literal["all", "restart"] = _f(
        "all", "Which tokens of a stutter's second saying unlikelihood_stutter pushes down. all: every one. "
        "restart: only the first piece of each saying after the first, where the reply began the phrase again "
        "(`losses._restarts`); the words after it are the right "
        "continuation of that start, and pushing them down can unlearn the phrase itself. With all, a run that "
        "had learned the label (advice, seed 1, keep_asked_opening on, 1.00 at v3-v4) wrote 'My guidance' "
        "('My guidance!', 'My guidance:') in place of 'My advice:' in 10 and 12 of 12 held-out replies at "
        "v7 and v8, after the batches of v6 and v7 held 'My advice: My advice:' replies, and ended at 0.00. "
        "unlikelihood_ngram still marks the continuation of a repeated phrase of n tokens or more, whatever "
        "this says.")
    w_unlikelihood: float = _f(
        1.0, "Weight of the repeat unlikelihood loss (summed over the marked tokens, divided by all the batch's "
        "response tokens).")
    opd_clip: float = _f(5.0, "OPD token advantage is clipped to [-c, c].")
    opd_floor: float | None = _f(
        None, "Lower bound of the token OPD advantage, in [-opd_clip, 0], in place of -opd_clip. 0: token OPD "
        "only raises the sampled tokens the hinted teacher gives more than the student does; pushing a "
        "corrected reply down is left to RL (and, with method opd, to nothing but the KL anchor and "
        "unlikelihood). With keep_asked_opening, token OPD then never counts against the opening. Each "
        "distilled turn logs the mean teacher-student gap before the bound (`opd_gap`). Why: in the label-gain "
        "runs with the base as teacher (docs/BENCHMARKS.md, fiftieth session) the learner kept almost no "
        "rollouts after v3, and the mean token-OPD advantage per batch was -0.2 or lower in 10 of the 15 "
        "later batches (down to -0.92) while the learned opening was lost. None: -opd_clip.")
    opd_no_repeat: int = _f(
        0, "Token OPD: a sampled token inside a token n-gram of this length that already occurred in its reply "
        "gets no positive advantage (a negative one stands); every token of the repeat counts, the first one "
        "included. The hinted teacher copies from its context: with Begin your reply with 'My advice:' in it, "
        "the base teacher scored the tokens of a reply that repeats 'My advice:' above the unhinted model (up to "
        "+4.3 nats; +1.28 mean inside a repeated trigram), and the loop's mean advantage was +1.79 against +0.42 "
        "for a good reply (scripts/opd_copy_bias.py), so a student that starts to loop on the phrase is taught "
        "to loop. 2 also catches the label said again as a list heading ('* **My advice:**', whose trigram "
        "differs from the opening's) at the cost of the positives inside any repeated bigram; in the learning "
        "benchmark 2 did not stop the doubled label and every user ended lower (docs/BENCHMARKS.md). 0: off.")
    opd_complaints: bool = _f(
        True, "Also distill (token or topk) from hints that only say what was wrong (the user's complaint, "
        "hint source `correction`, with no standing instruction). Told 'That doesn't answer my question at "
        "all.', the 135M base teacher answers with apologies and talk about the question ('I'm sorry for any "
        "misunderstanding', 'The question is asking for', 'You're a helpful AI assistant named SmolLM'), and "
        "distillation raises those tokens where the student samples them: a bottomline run's last version "
        "opened replies with 'I'm sorry for your loss' and 'In this case, the user asked about'. Off: such "
        "turns keep their judge score for RL and get no distillation.")
    opd_mode: Literal["token", "topk"] = _f("token", "token: teacher-student on sampled tokens; topk: KL.")
    top_k: int = _f(16, "Teacher tokens kept per position in topk mode (the rest form a tail bucket).")
    topk_direction: Literal["reverse", "forward"] = _f(
        "reverse", "topk mode: KL(student||teacher), mode-seeking; or KL(teacher||student), which also "
        "raises tokens the student gives almost no mass.")
    rollouts: int = _f(
        0, "Replies the hinted teacher writes per hinted turn, learned by the student without the hint "
        "(context distillation; reaches behaviour the student never samples). 0: none.")
    rollout_temperature: float = _f(0.0, "Teacher sampling temperature for rollouts; 0 is greedy.")
    rollout_complaints: bool = _f(
        True, "Also write rollouts for hints that only say what was wrong (the user's complaint, hint "
        "source `correction`), not what to do. In the benchmark's bottomline runs SmolLM2-135M's "
        "rollouts for those never met the user's rule, and the ones the screen kept were off topic.")
    rollout_max_tokens: int = _f(256, "Token budget of a rollout (and at most the turn's own max_new_tokens).")
    w_rollout: float = _f(1.0, "Weight of the rollout loss (mean over rollout tokens).")
    rollout_min_gain: float = _f(
        0.0, "Learn a rollout only if its mean teacher-minus-student logprob per token is at least this "
        "(the hint made it more likely than the student already finds it).")
    rollout_max_echo: float = _f(
        0.8, "Learn a rollout only if it repeats at most this share of the hint's word trigrams "
        "(a hint that holds the answer may be partly quoted; 1 keeps every rollout).")
    rollout_max_copy: float = _f(
        0.5, "Learn a rollout only if at most this share of its word trigrams repeats earlier assistant "
        "replies of the conversation (1 keeps every rollout).")
    rollout_max_repeat: float = _f(
        0.12, "Learn a rollout only if at most this share of its word trigrams repeats one earlier in it (the "
        "135M teacher loops: '3. Bake the bread 4. Bake the bread ...'; 1 keeps every rollout). Read off two "
        "steps runs' rollouts: those that read cleanly scored at most 0.11, loops 0.15 and up.")
    rollout_no_repeat: int = _f(
        0, "Write rollouts with no token n-gram of this length repeated inside the reply (learner.rollouts."
        "NoRepeatInReply), so a teacher that loops writes a reply the repeat check can keep; 0: off.")
    rollout_asked_opening: bool = _f(
        False, "Learn a rollout for a hint that names the phrase a reply must begin with (Begin your reply with "
        "'My advice:') only if it begins with that phrase. The 135M teacher often answers such a hint with a "
        "stock line that paraphrases the request (I'm glad you asked for my advice. ...), which passes the "
        "relevance and grounding checks and, learned, turns the student away from the preference.")
    rollout_asked_once: bool = _f(
        False, "Learn a rollout for a hint that names the phrase a reply must begin with only if it says that "
        "phrase once. The hinted teacher copies the quoted phrase out of its context ('My advice: \"My advice: "
        "Bring a dessert.'), and in an advice run where one such rollout was learned, 5 of 8 held-out replies "
        "later doubled the label. With it (and opd_no_repeat) on that seed, 1-2 rollouts per user were learned "
        "and the label was not (docs/BENCHMARKS.md), so it is off.")
    rollout_open_as_asked: bool = _f(
        False, "For a hint that names the phrase a reply must begin with, write the rollout after that phrase "
        "(the hinted teacher continues 'My advice:' instead of choosing its own first words) when the student's "
        "reply does not already open with it; the phrase is learned with the rest of the rollout (its gain, "
        "rollout_min_gain, is read on the teacher's part only). Sampled with "
        "the user's rule in its prompt, SmolLM2-135M opened 1 of 12 held-out replies with 'My advice:' and 1 "
        "of 12 with 'Imagine' (the learning benchmark's hinted row), so most rollouts for those users were "
        "screened out or taught other openings.")
    rollout_asked_phrase: bool = _f(
        False, "With rollout_open_as_asked, when every rollout written after the phrase a hint asks a reply to "
        "begin with is refused, learn the phrase alone (its tokens after the prompt, with no end-of-sequence "
        "token): the hint names that opening word for word, while what the small teacher writes after it is "
        "often refused. In a bottomline run 17 of the 20 rollouts written after 'In short,' were refused, "
        "every batch scored -1 throughout (no RL signal under the batch mean), and the student lost the opening "
        "and ended with empty replies (docs/BENCHMARKS.md).")
    rollout_asked_min_gain: float | None = _f(
        None, "rollout_min_gain for a rollout written after the phrase the hint asks to begin with "
        "(rollout_open_as_asked); None: rollout_min_gain. Read on the teacher's part only, such a rollout's "
        "gain says how much the hint favours what follows the phrase. On advice that is little: in a run "
        "9 of the 22 refused rollouts, all written after 'My advice:', failed the gain check alone, at gains "
        "of -0.25 to -0.02. At -0.3 (one seed, advice and bottomline) advice learned 15 rollouts against 6 and "
        "read 0.83 at v4, then 0.00 at the end, every reply cut at its token limit. On analogy the gain still "
        "refused pictures of the thing asked (docs/BENCHMARKS.md).")
    rollout_asked_splice: bool = _f(
        False, "With rollout_open_as_asked, for a hint whose asked phrase is a label closed by a colon or a comma "
        "('My advice:', 'In short,'), the rollout is that label and then the student's own reply (decoded and "
        "tokenized again, its first letter lowered after a comma), in place of a continuation the teacher "
        "writes: the hint applied as an edit (`rollouts.spliced_text`). What SmolLM2-135M writes after 'My "
        "advice:' is mostly generic list items, and advice's guard fell while such rollouts were learned; the "
        "student's own reply is its answer to the question. A splice passes the same screens (its gain: see "
        "rollout_splice_gain) and is trimmed after the label. A phrase that starts a sentence ('Imagine') "
        "still gets the teacher's continuation.")
    rollout_splice_gain: Literal["all", "label"] = _f(
        "all", "Where a splice's gain is read (screened by rollout_asked_min_gain if set, else rollout_min_gain). "
        "all: over the whole splice. Once the student has moved from the base, it finds its own words likelier "
        "than the hinted base teacher does, and in the first splice runs (advice and bottomline, seeds 0 and "
        "1) 62 of 83 refused splices failed on gain alone (3 to 6 learned a run). label: over the label only, "
        "as a divergence rollout's gain is read on the teacher's part only: what the hint asks for against "
        "what the student already writes. With it (advice and bottomline, seeds 0 and 1) advice ended at +0.50 "
        "(guard 0.92) and bottomline at +0.75 (0.96), against +0.63 (0.88) and +0.63 (0.79) with all; one run "
        "each (docs/BENCHMARKS.md).")
    rollout_min_relevance: float = _f(
        0.3, "Learn a rollout only if its all-MiniLM-L6-v2 cosine similarity to the conversation's opening "
        "user message is at least this (a reply about something else, such as a stock apology, is not learned; "
        "the benchmark's quality guard, fitted on hand-labelled replies, puts 'answers the question' at 0.26). "
        "0 skips the check and the embedding model.")
    rollout_grounding_tokens: int = _f(
        8, "Learn a rollout only if its first this many tokens depend on the conversation (see "
        "rollout_min_grounding); 0 skips the check.")
    rollout_min_grounding: float = _f(
        0.5, "Least mean logprob gain, in nats per token, of a rollout's opening after the real prompt over "
        "after a neutral request (system messages and tools kept). A stock opening the student writes "
        "whatever it is asked scores near 0.")
    rollout_pick: Literal["all", "best"] = _f(
        "all", "all: learn every rollout the screen keeps; best: of a turn's kept rollouts, only the one "
        "with the highest gain (the reply the hint made likeliest; use with rollouts > 1).")
    rollout_from: Literal["start", "divergence"] = _f(
        "start", "start: the hinted teacher writes the whole rollout. divergence: the rollout keeps the "
        "student's reply up to the first token where the hint asks for something else (with the hint in "
        "view, the teacher's weights give that token more than rollout_divergence_margin nats less than "
        "without, or prefer another token the hint raised by as much) and the teacher writes the rest; a "
        "reply where the hint asks for nothing else gets no rollout (see rollout_stop_floor). A correction "
        "about one part of a reply ('explain after the comparison') then keeps the part the user kept.")
    rollout_divergence_margin: float = _f(
        1.0, "Nats by which the hint must lower a reply token's logprob, or raise the teacher's preferred "
        "other token's (same weights, with the hint against without), for the rollout to leave the student's "
        "reply there (rollout_from divergence).")
    rollout_stop_floor: float = _f(
        -3.0, "rollout_from divergence: when the hint asks for nothing else at any token of the reply but the hinted "
        "teacher gives the reply's end-of-sequence token a logprob below this, the rollout continues the "
        "student's whole reply (a picture with no answer after it); otherwise such a reply gets no rollout. "
        "Probed on SmolLM2-135M: after picture-only replies the hinted base model's stop logprob was -5.9 to -8.7, "
        "after a complete long answer told 'keep it shorter' -0.45.")
    rollout_trim: bool = _f(
        False, "Learn a rollout that ran into its token budget only up to the end of its last full sentence, "
        "then the end-of-sequence token (as cut, it teaches the student never to stop, and the budget then cuts "
        "the student off too: in an analogy run with divergence rollouts, 6 of 8 held-out replies ran out).")
    rollout_trim_lists: bool = _f(
        False, "With rollout_trim, the end of a rollout's last finished list item is a place to stop too: a "
        "numbered list without full stops has no sentence end, and advice's teacher writes such lists after "
        "'My advice:' (17 of 24 held-out replies of that run's last version ran out).")
    rollout_no_hollow_lists: bool = _f(
        False, "Refuse a rollout that lists only headings with nothing under them ('My advice:\\n\\n* Use a "
        "good recipe:\\n* Choose a good pot:'). A share75 advice run learned one such rollout into v1; "
        "from v5, 9-10 of 24 held-out replies had that shape, and the quality guard passed them as on "
        "topic. Whether the rollout caused them is not shown (v1-v4 had at most 1), and the judge also "
        "scored one such training reply +1. On with the advice user that refuses such replies (one seed), it "
        "refused 2 rollouts; advice ended at 0.00, every reply cut at the budget (docs/BENCHMARKS.md).")
    rollout_trim_share: float = _f(
        1.0, "With rollout_trim, a rollout cut at its budget stops at its last place to stop within this share "
        "of the budget. Trimmed at the last place, 4 of the 7 rollouts an advice run learned were 58-63 tokens "
        "against a 64-token budget, and after one more 60-token list the student wrote lists that ran out in "
        "22 of 24 held-out replies; a reply learned right at the budget leaves no room for the student's own "
        "variation. At 0.75 two seeds of advice ended at 1.00 and 0.75, but under the advice user that refuses "
        "lists of headings every reply ran out again; at 0.5 (one seed) advice ended at 0.58 (docs/BENCHMARKS.md). "
        "1: anywhere.")
    rollout_trim_finished: bool = _f(
        False, "With rollout_trim_share below 1, a rollout that ended by itself past that share of its budget is "
        "trimmed too, to its last place to stop within it (one with no place to stop there is learned whole). "
        "The share's reason, room under the budget for the "
        "student's own variation, holds for them as well: at share 0.5 an advice run learned lists the teacher "
        "finished at 44 and 55 tokens of 64 while its trimmed rollouts stopped within 32, and its side replies "
        "ran out again (7 to 19 of 24 from v5). On share 0.5's second advice seed (one run) 2 of 24 side replies "
        "ran out at the end against 23 without it, but most were the label alone or said twice (0.17 against "
        "0.00).")
    rollout_drop_cut: bool = _f(
        False, "Do not learn a rollout that ran into its token budget (with rollout_trim, one that still has no "
        "place to stop): learned, it teaches the student to write past the budget, which cuts its reply off.")
    rollout_stop_in_reply: bool = _f(
        False, "With rollout_trim, a rollout cut at its budget may stop inside the student's part too, and a "
        "student reply cut at its budget where the hint asks for nothing else (rollout_from divergence) is "
        "learned up to its last place to stop, then the end-of-sequence token. The teacher's part of such a "
        "rollout is that token alone, so its gain is the hinted teacher's stop logprob there minus the "
        "student's. Otherwise nothing teaches a reply that runs out where to stop: token distillation has "
        "no end-of-sequence token to score, and when a whole batch runs out its RL scores cancel against the "
        "batch mean. In an advice run the student learned 'My advice:', then wrote lists that ran out in "
        "every held-out reply. In two runs of three users it never fired: a hint on a cut reply asked for the "
        "opening phrase (a rollout is written after it) or only complained (no rollout) (docs/BENCHMARKS.md).")
    rollout_stop_weight: float = _f(
        1.0, "Weight of a learned rollout's closing end-of-sequence token in the rollout loss (and the replay "
        "loss), against 1 for every other token. The stop is one token of the forty to sixty in a trimmed "
        "rollout: with it at 1, an advice run learned the label and the list items of its rollouts, and every "
        "final held-out reply ran on to the 64-token budget. Tried once at 10 (share 0.5, seed 0, advice): it "
        "learned 7 rollouts and ended at 0.33 (guard 0.58), 13 of 24 side replies cut, against 0.58 (0.83) "
        "and 13 cut at 1 "
        "(docs/BENCHMARKS.md); not shown to help. 1: no extra weight.")
    rollout_replay: int = _f(
        0, "Learned rollouts of earlier batches learned again with each batch (the N most recent, from the "
        "DB): a hint that shows the wanted reply may come once in many turns, and one pass of one "
        "rollout barely moves the student. 0: none.")
    teacher: Literal["base", "adapter"] = _f("base", "Teacher weights: base model or current adapter.")
    standing_instructions: int = _f(
        0, "Up to this many standing instructions (learner/standing.py: what users said to do in at least "
        "standing_min_sessions sessions) go before a hinted turn's own hint in the teacher's context, when the "
        "hint does not already say them; hints that only complain then get rollouts too. 0: none.")
    standing_min_sessions: int = _f(3, "Sessions an instruction must be given in to stand.")
    standing_window: int = _f(200, "Latest instruction-hinted main turns the standing instructions are read from.")
    baseline: bool = _f(True, "Subtract the batch-mean score from RL advantages.")
    max_staleness: int = _f(4, "Drop samples served more than this many adapter versions ago.")
    rollback_margin: float | None = _f(
        None, "Serve the parent again when the served version's mean judged score falls below its "
        "parent's by more than this (learner/regression.py); None: never roll back.")
    rollback_min_turns: int = _f(8, "Judged turns each of the two versions must have served before "
                                 "the rollback check decides.")
    publish_check: int = _f(
        0, "Before a new version is served, greedy replies to this many of the latest user requests are "
        "checked against the base model's (learner/publish_check.py): too short, looping, or off the request. "
        "A version that fails on more than publish_check_slack requests beyond the base is kept as rejected "
        "and never served. 0: publish every version.")
    publish_check_canary: int = _f(
        0, "Everyday requests from learner/canary_prompts.txt (16 there) added to the publish check, asked in "
        "the setting of the latest conversation. The latest requests are what the batch trained on; these "
        "never are, so they show what a version does to requests it has not seen. 0: none.")
    publish_check_tokens: int = _f(64, "Token budget of each publish-check reply.")
    publish_check_tries: int = _f(
        1, "Checks per version: after a failed one, the LoRA weights are set half as far from the weights it "
        "trained from (the served version's, or with publish_check_train_on a rejected one's) and checked "
        "again; 1: reject at once.")
    publish_check_slack: int = _f(0, "Requests a new version may fail beyond those the base model fails.")
    publish_check_train_on: int = _f(
        0, "The next version trains on from a rejected one, not from the served version, while the rejected "
        "versions in a row since the served one number at most this; then training starts again from the "
        "served version. Serving waits for a version that passes, but learning is not sent back each time: "
        "with 0 an advice run (seed 1) refused v2, v4 and v6, each time before the label was learned, and the "
        "versions it served never learned it. With 3 (same seed, tries 1) every version failed: 6 of 23, then 8, 7 "
        "and 11 of 24 check replies against the base's 0 or 1; v4 opened 18 of them with the label and 10 of "
        "those failed (6 loops), and the base served to the end. The turns trained on were served by the served "
        "version, so the weights may be this many versions past them (max_staleness counts served versions "
        "only; ratio_cap still bounds each token). 0: always from the served version.")
    publish_check_drop: float = _f(
        0.3, "A reply is off the request when its MiniLM relevance to the conversation's opening request "
        "falls more than this below the base model's reply. On 12 training requests each of two benchmark "
        "users, the base model with the user's hint in its context wrote 17 answers that do not loop, at most "
        "0.34 below its plain replies and 2 of them more than 0.25 below (scripts/publish_check_gap.py).")
    publish_check_max_repeat: float = _f(
        0.2, "A reply loops when more than this share of its word trigrams repeat an earlier one.")
    # --- runtime -----------------------------------------------------------------------------
    device: str = _f("auto", "auto, cpu or cuda[:N].")
    dtype: Literal["auto", "float32", "bfloat16"] = _f("auto", "auto: fp32 on CPU, bf16 on CUDA.")
    logprob_chunk: int = _f(1024, "Response positions per chunk of lm_head + log_softmax.")
    seed: int = _f(0, "Torch seed for LoRA init.")
    lock_stale_s: float = _f(3600.0, "A `training` version row older than this is a dead run's lock.")

    @property
    def checks_before_publish(self) -> bool:
        """Whether a new version is checked before it is served (learner/publish_check.py)."""
        return self.publish_check > 0 or self.publish_check_canary > 0

    def min_gain(self, asked_prefix: bool) -> float:
        """The gain floor of a rollout: rollout_asked_min_gain for one written after the asked phrase, if set."""
        if asked_prefix and self.rollout_asked_min_gain is not None:
            return self.rollout_asked_min_gain
        return self.rollout_min_gain

    def __post_init__(self) -> None:
        problems = []
        if self.method not in ("rl", "opd", "combined"):
            problems.append(f"method={self.method!r}: set rl, opd or combined")
        if self.opd_mode not in ("token", "topk"):
            problems.append(f"opd_mode={self.opd_mode!r}: set token or topk")
        if self.topk_direction not in ("reverse", "forward"):
            problems.append(f"topk_direction={self.topk_direction!r}: set reverse or forward")
        if self.standing_instructions < 0 or self.standing_min_sessions < 1 or self.standing_window < 1:
            problems.append("standing_instructions must be >= 0, standing_min_sessions and standing_window >= 1")
        if self.rollout_replay < 0:
            problems.append(f"rollout_replay={self.rollout_replay}: set 0 or more")
        if self.rollout_pick not in ("all", "best"):
            problems.append(f"rollout_pick={self.rollout_pick!r}: set all or best")
        if self.rollout_from not in ("start", "divergence"):
            problems.append(f"rollout_from={self.rollout_from!r}: set start or divergence")
        if self.rollout_divergence_margin <= 0:
            problems.append(f"rollout_divergence_margin={self.rollout_divergence_margin}: set it above 0")
        if self.teacher not in ("base", "adapter"):
            problems.append(f"teacher={self.teacher!r}: set base or adapter")
        for name in ("batch_size", "steps_per_batch", "rank", "top_k", "logprob_chunk"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)}: set 1 or more")
        if not 0 <= self.eps_low < 1 or self.eps_high < 0:
            problems.append("eps_low must be in [0, 1) and eps_high >= 0")
        if self.ratio_cap < 1 + self.eps_high:
            problems.append(f"ratio_cap={self.ratio_cap}: set at least 1 + eps_high ({1 + self.eps_high})")
        if self.lr is not None and self.lr <= 0:
            problems.append(f"lr={self.lr}: set a positive rate, or None for the device default")
        if not 0 < self.lr_decay <= 1 or not 0 < self.lr_floor < 1:
            problems.append(f"lr_decay={self.lr_decay}, lr_floor={self.lr_floor}: set lr_decay in (0, 1], "
                            "lr_floor in (0, 1)")
        if self.rollouts < 0 or self.rollout_temperature < 0 or self.rollout_max_tokens < 1 or self.w_rollout < 0:
            problems.append("rollouts, rollout_temperature and w_rollout must be >= 0, rollout_max_tokens >= 1")
        if self.unlikelihood_ngram == 1 or self.unlikelihood_ngram < 0:
            problems.append(f"unlikelihood_ngram={self.unlikelihood_ngram}: set 0 (off) or 2 and up")
        if self.w_unlikelihood < 0:
            problems.append(f"w_unlikelihood={self.w_unlikelihood}: a loss weight, set it >= 0")
        if self.opd_no_repeat == 1 or self.opd_no_repeat < 0:
            problems.append(f"opd_no_repeat={self.opd_no_repeat}: set 0 (off) or 2 and up")
        if self.rollout_no_repeat == 1 or self.rollout_no_repeat < 0:
            problems.append(f"rollout_no_repeat={self.rollout_no_repeat}: set 0 (off) or 2 and up")
        if self.rollout_grounding_tokens < 0:
            problems.append(f"rollout_grounding_tokens={self.rollout_grounding_tokens}: set 0 or more")
        if not -1 <= self.rollout_min_relevance <= 1:
            problems.append(f"rollout_min_relevance={self.rollout_min_relevance}: a similarity, set it in [-1, 1]")
        shares = (self.rollout_max_echo, self.rollout_max_copy, self.rollout_max_repeat)
        if not all(0 <= share <= 1 for share in shares):
            problems.append("rollout_max_echo, rollout_max_copy and rollout_max_repeat are shares: set them in [0, 1]")
        if self.rollouts > 1 and self.rollout_temperature == 0:
            problems.append(f"rollouts={self.rollouts} at rollout_temperature=0 writes one greedy reply "
                            "several times: set rollouts=1 or a temperature above 0")
        if self.rollout_trim_lists and not self.rollout_trim:
            problems.append("rollout_trim_lists only changes where rollout_trim cuts: set rollout_trim too")
        if self.rollout_trim_finished and not (self.rollout_trim and self.rollout_trim_share < 1):
            problems.append("rollout_trim_finished trims within rollout_trim_share: set rollout_trim and a share "
                            "below 1")
        if self.rollout_stop_weight < 0:
            problems.append(f"rollout_stop_weight={self.rollout_stop_weight}: a loss weight, set it >= 0")
        if not 0 < self.rollout_trim_share <= 1:
            problems.append(f"rollout_trim_share={self.rollout_trim_share}: a share of the budget, set it in (0, 1]")
        if self.rollout_stop_in_reply and not (self.rollout_trim and self.rollout_from == "divergence"):
            problems.append("rollout_stop_in_reply trims rollouts that keep the student's reply: set rollout_trim "
                            "and rollout_from divergence too")
        if self.rollout_asked_phrase and not self.rollout_open_as_asked:
            problems.append("rollout_asked_phrase learns the phrase of refused rollouts written after it: "
                            "set rollout_open_as_asked too")
        if self.rollout_splice_gain not in ("all", "label"):
            problems.append(f"rollout_splice_gain={self.rollout_splice_gain!r}: set all or label")
        if self.rollout_splice_gain != "all" and not self.rollout_asked_splice:
            problems.append("rollout_splice_gain reads the gain of splices: set rollout_asked_splice too")
        if self.rollout_asked_splice and not self.rollout_open_as_asked:
            problems.append("rollout_asked_splice splices the phrase a hint asks replies to open with: "
                            "set rollout_open_as_asked too")
        if self.rollout_asked_min_gain is not None and not self.rollout_open_as_asked:
            problems.append("rollout_asked_min_gain screens rollouts written after an asked phrase: "
                            "set rollout_open_as_asked too")
        if self.rollback_margin is not None and not 0 <= self.rollback_margin < 2:
            problems.append(f"rollback_margin={self.rollback_margin}: mean scores lie in [-1, 1], set it in [0, 2)")
        counts = (self.publish_check, self.publish_check_canary, self.publish_check_slack, self.publish_check_train_on)
        if min(counts) < 0 or min(self.publish_check_tokens, self.publish_check_tries) < 1:
            problems.append("publish_check, publish_check_canary, publish_check_slack and publish_check_train_on "
                            "must be >= 0, "
                            "publish_check_tokens and publish_check_tries >= 1")
        if not 0 <= self.publish_check_drop <= 2 or not 0 <= self.publish_check_max_repeat <= 1:
            problems.append("publish_check_drop is a similarity gap: set it in [0, 2]; "
                            "publish_check_max_repeat is a share: set it in [0, 1]")
        if self.rollback_min_turns < 1:
            problems.append(f"rollback_min_turns={self.rollback_min_turns}: set 1 or more")
        if self.opd_clip <= 0 or self.max_staleness < 0 or self.kl_coef < 0:
            problems.append("opd_clip must be > 0, max_staleness and kl_coef >= 0")
        if self.opd_floor is not None and not -self.opd_clip <= self.opd_floor <= 0:
            problems.append(f"opd_floor={self.opd_floor}: set it in [-opd_clip, 0] or leave it None (a floor "
                            "above 0 would raise tokens the hinted teacher scores under the student)")
        problems += self._idle_options()
        if problems:
            raise ValueError("invalid TrainConfig: " + "; ".join(problems))

    def _idle_options(self) -> list[str]:
        """Options set away from their default while the feature they tune is off: a saved config that
        says `rollout_stop_weight` 10 with no rollouts and no replay would train exactly as without it."""
        default = TrainConfig.__dataclass_fields__
        idle = {
            "rollouts or rollout_replay (set either above 0)": (self.rollouts == 0 and self.rollout_replay == 0,
                                                                ("rollout_stop_weight",)),
            "unlikelihood_ngram (set 2 or more) or unlikelihood_stutter (set true)": (
                self.unlikelihood_ngram == 0 and not self.unlikelihood_stutter, ("w_unlikelihood",)),
            "unlikelihood_stutter (set true)": (not self.unlikelihood_stutter, ("unlikelihood_stutter_marks",)),
            "kl_coef (set above 0)": (self.kl_coef == 0, ("kl_skip_asked",)),
            "lr_decay (set under 1)": (self.lr_decay == 1, ("lr_floor",)),
            "opd_mode token": (self.opd_mode != "token", ("opd_floor",)),
            "publish_check or publish_check_canary (set either above 0)": (
                not self.checks_before_publish,
                ("publish_check_tokens", "publish_check_tries", "publish_check_slack", "publish_check_drop",
                 "publish_check_max_repeat", "publish_check_train_on")),
        }
        out = []
        for needs, (off, names) in idle.items():
            moved = [name for name in names if off and getattr(self, name) != default[name].default]
            if moved:
                out.append(f"{', '.join(moved)}: used only with {needs}")
        return out

    def resolved_lr(self, device: str) -> float:
        if self.lr is not None:
            return self.lr
        return GPU_LR if device.startswith("cuda") else CPU_LR

    def decay_depth(self) -> int:
        """The chain length past which lr_decay is at its floor: longer chains train at the same rate
        (0 with lr_decay off)."""
        return 0 if self.lr_decay == 1 else math.ceil(math.log(self.lr_floor) / math.log(self.lr_decay))

    def version_lr(self, device: str, depth: int) -> float:
        """The rate for a version whose parent chain from the base model holds `depth` versions."""
        return self.resolved_lr(device) * max(self.lr_floor, self.lr_decay ** depth)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:  # strict: a typo in a saved config must not silently train with defaults
            raise ValueError(f"unknown TrainConfig fields: {sorted(unknown)}")
        return cls(**data)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> TrainConfig:
        """Defaults, then `DATA_DIR/train_config.json` if present, then settings, then overrides."""
        data: dict[str, Any] = {}
        path = settings.data_dir / "train_config.json"
        if path.exists():
            data.update(json.loads(path.read_text()))
        data.update(method=settings.method, batch_size=settings.train_batch_size)
        if settings.device != "auto":
            data["device"] = settings.device
        data.update(overrides)
        return cls.from_json(data)
