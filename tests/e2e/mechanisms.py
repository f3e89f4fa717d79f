"""Per preset: the diagnostics its CI run must log, and predicates over the 3 steps' metrics that show
its mechanism at work (not just present). The one table for every preset in configs/methods/.

``Check.active(rows, base)`` gets the preset's metrics rows (one per step) and those of the plain
``grpo`` preset run on the same seed (step 1 samples the same batch, so a knob that changes the
advantage or the aggregation shows as a different step-1 value). A check with ``overrides`` runs
separately: the settings its mechanism needs to fire within 3 tiny steps (``warm`` = warm-start the
policy first). ``xfail`` marks a known gap (strict: the lead flips it when the fix lands).
Mechanisms that cannot fire in 3 tiny steps are in ``NOT_IN_CI`` with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from tests.helpers.tolerance import U32, sum_rtol

Rows = list[dict[str, float]]


@dataclass(frozen=True)
class Check:
    what: str  # the mechanism, in words
    active: Callable[[Rows, Rows], bool]
    overrides: tuple[str, ...] = ()
    warm: bool = False
    xfail: str = ""
    base: tuple[str, ...] = ()  # when set, ``base`` is the plain grpo preset re-run with these overrides


def col(rows: Rows, key: str) -> list[float]:
    return [r[key] for r in rows]


def some(rows: Rows, key: str, test: Callable[[float], bool] = lambda v: v > 0) -> bool:
    return any(test(r[key]) for r in rows if key in r)


def step1_differs(key: str) -> Callable[[Rows, Rows], bool]:
    return lambda rows, base: rows[0][key] != base[0][key]


def _unanimous_steps_have_zero_advantage(rows: Rows, base: Rows) -> bool:
    unanimous = [r for r in rows if r["reward/consensus"] == 1.0]
    return bool(unanimous) and all(r["adv/abs_mean"] == 0.0 and r["reward/judge_calls"] == 0 for r in unanimous)


def _tether_weight_follows_the_critic(rows: Rows, base: Rows) -> bool:
    """TETHER's w on toy_mixed_test (rewards 1, 0, 1, 0 in every group of 4), exact by construction:
    the leave-one-out baseline misses each row by 2/3 (b = 1/3 for r = 1, 2/3 for r = 0), so
    Var_grp = 4/9 on every step; the fresh critic's zero head gives V = 1/2 through the sigmoid bound,
    so step 1's MSE_V = (±1/2)² = 1/4 exactly on every token, and w = 1 − (1/4)/(4/9) = 7/16 (the
    critic beats the group baseline, so the baseline moves toward it). Later steps: w is the rule
    applied to that step's logged MSE_V and Var_grp (the critic was updated in between)."""
    var_rtol = sum_rtol(32)  # Var_grp: 16 squared errors summed + a few roundings each, in float32
    first = rows[0]
    if first["adv/tether_mse_v"] != 0.25 or abs(first["adv/tether_w"] - 7 / 16) > var_rtol:
        return False
    return all(abs(r["adv/tether_var_grp"] - 4 / 9) <= var_rtol * 4 / 9 for r in rows) and tether_rule(rows, base)


def tether_rule(rows: Rows, base: Rows) -> bool:
    """TETHER's w is clip(1 − MSE_V/Var_grp, 0, 1) of each step's logged MSE_V and Var_grp, on every step."""
    w_atol = 4 * U32  # w from the logged float32 MSE_V, Var_grp: a sum with eps, a division, 1 − x, storage
    return all(abs(r["adv/tether_w"] - min(max(1 - r["adv/tether_mse_v"] / (r["adv/tether_var_grp"] + 1e-8), 0.0),
                                             1.0)) <= w_atol for r in rows)


EVERY_ROW = "optim.skip_zero_rows=false"  # the update computes every row (loss/entropy over all of them)
# Rewards 1, 0, 1, 0 within every group whatever is sampled (tests/e2e/tiny.py): the checks that need a
# learning signal (a mixed group, in step 1 for a comparison with GRPO) get it by construction, not by
# the luck of an untrained model writing a '7' (about 1 completion in 16; a group of 4 with no '7' at
# all is about a third of them, so step 1 has no signal for some seeds and CPUs).
MIXED = "task.name=toy_mixed_test"
# FADE's η = clip(H̄/H_target, 0, 1): a target above ln(vocab) (the char vocabulary has ~100 tokens,
# ln 100 ≈ 4.6 nats, the largest entropy any batch can have) puts η < 1 on every step by construction.
# (With the preset's target read from the first batch, η < 1 needed a later batch to come out less
# random than the first: a coin flip of the sampler.)
FADE_TARGET = "algorithm.advantage.entropy_target=10.0"
# Length-dependent aggregations (dr_grpo's constant C, length_power's L^(α−1)) agree with GRPO's 1/L when
# every row fills the cap (L = C for all rows). The untrained model's logits are nearly flat, so it writes
# eos about once in 110 tokens on every seed: with the 12-token cap ~90% of rows run to it and all 16
# rows of step 1 did on 3 seeds of 12 (length_power's check failed there). With a 96-token cap ~40% of
# rows do (measured over 12 seeds, 19% to 56%), and all 16 at once is ~0.4^16 ≈ 4e-7 (1e-4 at 56%).
LONG = "rollout.max_new_tokens=96"
DIGIT_STEPS = "rollout.sampler.step_separators=['0','1','2','3','4','5','6','7','8','9']"

# Each method's own diagnostics, which must reach metrics.jsonl when its preset trains.
METHOD_METRICS = {
    "fade": ["adv/pos_mass", "adv/neg_mass"],
    "mmpo": ["adv/moment_weight_mean"],
    "sa_mrpo": ["adv/saturation_0", "adv/weight_0"],
    "taco": ["adv/taco_weight_mean", "adv/taco_reweighted_frac"],
    "answer_mask": ["adv/answer_token_frac", "adv/answer_zeroed_frac"],
    "dapo": ["rollout/kept_groups", "rollout/rounds", "reward/overlong_frac"],
    "gspo": ["loss/clipfrac"],
    "cliff": ["adv/mistake_frac", "adv/mistake_pos_frac"],
    "d_grpo": ["adv/planner_adv_abs_mean", "adv/num_plans"],
    "up": ["loss/pos_unclipped_frac", "loss/pos_frac"],
    "ripo": ["loss/fr_dist_mean", "loss/clipfrac"],
    "oc_grpo": ["rollout/guided_groups_frac", "loss/offpolicy_frac", "loss/is_weight_mean"],
    "armor": ["rollout/anchor_rows_frac", "loss/offpolicy_frac", "loss/is_capped_frac"],
    "outer_prefix": ["rollout/prefix_tokens_mean", "rollout/prefix_empty_frac"],
    "bpco": ["adv/lambda_clamped", "adv/lambda_mean", "critic/explained_var", "critic/loss", "critic/value_mean",
             "critic/grad_norm"],
    "bpco_privileged": ["adv/lambda_clamped", "critic/explained_var", "critic/loss", "critic/value_mean",
                        "critic/grad_norm"],
    "tether": ["adv/tether_w", "adv/tether_mse_v", "adv/tether_var_grp", "critic/explained_var", "critic/grad_norm"],
    "cvpo": ["adv/value_var_mean", "adv/cvpo_factor_mean", "adv/cvpo_factor_clipped", "critic/explained_var",
             "critic/grad_norm"],
    "gar": ["reward/gar_mean", "reward/gar_cosine", "reward/gar_relative", "reward/gar_passing",
            "reward/gar_anchor_forwards"],
    "parallel_shapley": ["reward/shapley_mean", "reward/shapley_outcome", "reward/shapley_phi_abs",
                         "rollout/paths_per_rollout"],
    "tcpo": ["adv/turns_mean", "adv/retro_credit_mean", "adv/hindsight_frac", "adv/credit_abs_mean",
             "rollout/cf_turn_frac", "rollout/turns_mean", "rollout/env_token_frac"],
    "aigb_dgrpo": ["adv/planner_adv_abs_mean", "adv/num_plans", "adv/executor_adv_abs_mean", "rollout/turns_mean"],
    "specroll": ["rollout/spec_accept_rate", "rollout/spec_tokens_per_forward"],
    "kgps": ["select/kgps_update_size", "select/kgps_q", "select/kgps_utility_selected", "select/kgps_var_mean",
             "select/kgps_seen_frac"],
    "de_venus": ["select/labelled", "select/label_budget", "select/data_budget", "select/trained_distinct",
                 "select/pseudo"],
    "active_selection": ["select/labelled", "select/label_budget", "select/data_budget", "select/trained_distinct"],
    "ttrl": ["reward/consensus", "reward/answer_entropy", "reward/pseudo_mean", "reward/gold_accuracy"],
    "om_grpo": ["reward/soft_consensus_mean", "reward/contrast_abs_mean", "reward/contrast_pairs",
                "reward/answer_entropy", "adv/answer_token_frac", "reward/judge_calls"],
    "hi_ttrl": ["rollout/hi_ttrl_partial_consensus", "rollout/hi_ttrl_hinted_rows_frac", "reward/consensus",
                "reward/answer_entropy"],
    "chess_rl": ["reward/legal"],
    "c3rl": ["reward/c3rl_mean", "reward/c3rl_correct", "reward/c3rl_stated_frac", "reward/c3rl_calibration",
             "reward/c3rl_calibration_std", "reward/c3rl_reference"],
}

MECHANISMS: dict[str, list[Check]] = {
    "grpo": [Check("group-relative advantages", lambda r, b: some(r, "adv/abs_mean"), overrides=(MIXED,))],
    # loss/entropy probes the aggregation over every row: with optim.skip_zero_rows it covers only the
    # rows the update computes (the GRPO base runs with the skip off too).
    "dr_grpo": [Check("no std scaling and a constant normaliser: step-1 advantages and aggregation differ from GRPO",
                      lambda r, b: step1_differs("adv/abs_mean")(r, b) and step1_differs("loss/entropy")(r, b),
                      overrides=(EVERY_ROW, MIXED, LONG), base=(MIXED, LONG))],
    "std_dial": [Check("the std dial: step-1 advantages differ from GRPO's", step1_differs("adv/abs_mean"),
                       overrides=(MIXED,), base=(MIXED,))],
    "length_power": [Check("length weights L^(α−1): the step-1 token aggregation differs from GRPO's",
                           step1_differs("loss/entropy"), overrides=(EVERY_ROW, LONG), base=(LONG,))],
    "mmpo": [Check("moment weights ≠ 1", lambda r, b: some(r, "adv/moment_weight_mean", lambda v: v != 1.0))],
    "fade": [Check("focal / dynamic-entropy scaling moves off 1",
                   lambda r, b: some(r, "adv/lambda_neg", lambda v: v != 1.0) or some(r, "adv/eta", lambda v: v != 1.0),
                   overrides=(FADE_TARGET,))],
    "sa_mrpo": [Check("saturation-aware weights differ between two objectives",
                      lambda r, b: some(r, "adv/weight_0", lambda v: v != 1.0)
                      and any(x["adv/weight_0"] != x["adv/weight_1"] for x in r),
                      overrides=("task.params.second_digit=3",))],
    "taco": [Check("positive credit on tail tokens is down-weighted", lambda r, b: some(r, "adv/taco_reweighted_frac"),
                   overrides=("warm_start.steps=100", "warm_start.batch_size=32", "rollout.temperature=1.5",
                              "rollout.prompts_per_step=8", "rollout.group_size=8"), warm=True)],
    # Every row has an advantage (MIXED); 3 steps x 16 rows x 32 tokens make a '#' (the span's start; ~1
    # character in 100 for the untrained model) certain to be sampled somewhere.
    "answer_mask": [Check("answer-span tokens lose their advantage", lambda r, b: some(r, "adv/answer_zeroed_frac"),
                          overrides=(MIXED, "rollout.max_new_tokens=32"))],
    "dapo": [Check("overlong penalty and dynamic-sampling refills",
                   lambda r, b: some(r, "reward/overlong_frac") and some(r, "rollout/rounds", lambda v: v > 1))],
    "gspo": [Check("sequence-level ratio clipping binds", lambda r, b: some(r, "loss/clipfrac"))],
    "cliff": [Check("the teacher finds first mistakes", lambda r, b: some(r, "adv/mistake_frac"))],
    "d_grpo": [Check("planner advantages", lambda r, b: some(r, "adv/planner_adv_abs_mean"))],
    "aigb_dgrpo": [Check("decoupled planner and executor advantages",
                         lambda r, b: some(r, "adv/planner_adv_abs_mean") and some(r, "adv/executor_adv_abs_mean"))],
    "up": [Check("positive tokens beyond 1+ε stay unclipped", lambda r, b: some(r, "loss/pos_unclipped_frac"),
                 overrides=("optim.lr=0.03",))],
    "ripo": [Check("Fisher-Rao distances measured", lambda r, b: some(r, "loss/fr_dist_mean"))],
    "oc_grpo": [Check("guided rows trained with importance weights ≠ 1",
                      lambda r, b: some(r, "rollout/guided_groups_frac") and some(r, "loss/offpolicy_frac")
                      and some(r, "loss/is_weight_mean", lambda v: v != 1.0))],
    "armor": [Check("anchor rows from the reference, importance-weighted",
                    lambda r, b: some(r, "rollout/anchor_rows_frac") and some(r, "loss/offpolicy_frac")
                    and some(r, "loss/is_weight_mean", lambda v: v != 1.0))],
    "outer_prefix": [Check("continuations of weak-model prefixes", lambda r, b: some(r, "rollout/prefix_tokens_mean"),
                           overrides=(DIGIT_STEPS,))],
    # 4 mini-batches per batch: from the second on the policy has moved, so the DPPO trust region
    # judges ratios != 1 (behaviour KL > 0; with one epoch and no mini-batches it was exactly 0).
    "bpco": [Check("the policy moves within a batch, so the DPPO trust region sees ratios != 1",
                   lambda r, b: some(r, "loss/behaviour_kl"))],
    "bpco_privileged": [Check("the policy moves within a batch, so the DPPO trust region sees ratios != 1",
                              lambda r, b: some(r, "loss/behaviour_kl"))],
    "tether": [Check("a critic more accurate than the group baseline gets weight: w = clip(1 − MSE_V/Var_grp) = 7/16 "
                     "on step 1 (rewards 1,0,1,0 per group, a fresh critic's V = 1/2)", _tether_weight_follows_the_critic,
                     overrides=(MIXED,))],
    "cvpo": [Check("value-variance factors are not uniform",
                   lambda r, b: some(r, "adv/cvpo_factor_mean", lambda v: v != 1.0))],
    "gar": [Check("gradient-aligned bonus", lambda r, b: some(r, "reward/gar_bonus_frac"))],
    "parallel_shapley": [Check("path Shapley credit", lambda r, b: some(r, "reward/shapley_phi_abs"))],
    "tcpo": [Check("counterfactual re-sampling of selected turns", lambda r, b: some(r, "rollout/cf_turn_frac"))],
    "specroll": [Check("drafts accepted: more than one token per target forward",
                       lambda r, b: some(r, "rollout/spec_tokens_per_forward", lambda v: v > 1.0))],
    "kgps": [Check("the Kalman process noise is not constant", lambda r, b: len(set(col(r, "select/kgps_q"))) > 1)],
    "de_venus": [Check("pseudo-labels within the label budget",
                       lambda r, b: some(r, "reward/pseudo_frac")
                       and all(x["select/labelled"] <= x["select/label_budget"] for x in r))],
    "active_selection": [Check("labelled prompts within the budget, new prompts every step",
                               lambda r, b: all(0 < x["select/labelled"] <= x["select/label_budget"] for x in r)
                               and col(r, "select/trained_distinct") == sorted(set(col(r, "select/trained_distinct"))))],
    "ttrl": [Check("majority-vote pseudo-rewards", lambda r, b: some(r, "reward/pseudo_mean"))],
    "hi_ttrl": [Check("out-of-band groups continue MCMC hints",
                      lambda r, b: some(r, "rollout/hi_ttrl_hinted_rows_frac") and some(r, "rollout/hi_ttrl_hint_tokens_mean"),
                      overrides=("rollout.group_size=8",))],
    "om_grpo": [Check("the policy judges disagreeing pairs",
                      lambda r, b: some(r, "reward/judge_calls") and not some(r, "reward/judge_error_frac")),
                Check("unanimous groups: no pairs, zero advantage (docs/methods.md §2.13 test 2)",
                      _unanimous_steps_have_zero_advantage, overrides=("rollout.temperature=0.05",))],
    "c3rl": [Check("stated confidences make the calibration term vary",
                   lambda r, b: some(r, "reward/c3rl_stated_frac") and some(r, "reward/c3rl_calibration_std"),
                   overrides=("warm_start.steps=120", "warm_start.batch_size=32"), warm=True)],
}

NOT_IN_CI = {
    "chess_rl": "an untrained model never writes a legal move; the preset's 300-step chess warm start takes minutes "
                "on a CPU (a longer run is quoted in the issue note)",
}


def _two_phases(rows: Rows, base: Rows) -> bool:
    """GRPO steps (a loss, no ES update) and then ES steps (an ES update, no loss), in that order; an ES
    step moves the weights."""
    phase = ["es" if "es/update_norm" in r else "grpo" for r in rows]
    k = phase.index("es") if "es" in phase else len(phase)
    return 0 < k < len(rows) and all("loss/total" in r for r in rows[:k]) \
        and all("loss/total" not in r for r in rows[k:]) and some(rows[k:], "es/update_norm")


def _round_anchored_kl(rows: Rows, base: Rows) -> bool:
    """Rounds of 2 steps: the KL reference is re-anchored on steps 1 and 3 (KL exactly 0 there) and the
    policy has moved away from it by step 2 (KL > 0)."""
    return col(rows, "lure/anchored")[:3] == [1.0, 0.0, 1.0] and rows[0]["loss/kl"] == 0.0 \
        and rows[1]["loss/kl"] > 0.0 and rows[2]["loss/kl"] == 0.0


# Presets the trainer test does not check: the loops (their own e2e tests assert these: tests/e2e/test_es.py,
# test_hyper_es_progressive.py, test_lure.py) and chess_rl (NOT_IN_CI on the testbed); the real-model table
# (benchmarks/every_method_smollm2.py) reads them.
MORE_MECHANISMS: dict[str, list[Check]] = {
    "es": [Check("sampled fitness varies across the population and the weights move",
                 lambda r, b: some(r, "reward/std") and some(r, "es/update_norm"))],
    "grpo_then_es": [Check("GRPO steps, then ES steps that move the weights", _two_phases)],
    "hyper_es": [Check("LoRA directions trained, their merge coefficients searched",
                       lambda r, b: some(r, "directions/norm_0") and some(r, "es/num_coefficients"))],
    "progressive_rlvr": [Check("the TinyLoRA student distils the RL teacher: reverse KL measured, adapter moved",
                               lambda r, b: all(math.isfinite(x["distill/reverse_kl"]) for x in r)
                               and some(r, "adapter/abs_mean"))],
    "lure": [Check("self-play with a KL anchored at each round's start", _round_anchored_kl)],
    "chess_rl": [Check("legal moves written", lambda r, b: some(r, "reward/legal"))],
}
