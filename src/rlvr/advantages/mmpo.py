"""MMPO: weight each prompt's centred reward by the gradient of several failure moments E[f^m]."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput, sequence_scores
from rlvr.ops import broadcast_to_tokens, group_stats
from rlvr.registry import param, register
from rlvr.types import AdvantageInputs, BatchError

ESTIMATORS = ("hypergeometric", "leave_one_out")


@dataclass(frozen=True)
class MMPOConfig:
    budget_K: int = param(0, "K of the truncated time to first success min(T, K); moments f^1..f^(K−1); "
                             "required (>= 2; 0 = unset, an error when called); K = 2 is Dr. GRPO")
    moment_weights: list = param([], "c_1..c_(K−1) >= 0 (RECONSTRUCTION); empty = all 1")
    moment_estimator: str = param("hypergeometric", "unbiased f̂^(j) from the group (RECONSTRUCTION): "
                                                    "'hypergeometric' (all G rows) or 'leave_one_out' "
                                                    "(the other G−1 rows, uncorrelated with r_i)")

    def __post_init__(self) -> None:
        if self.budget_K != 0 and self.budget_K < 2:
            raise ValueError(f"mmpo: budget_K must be >= 2 (K = 1 has no moment to optimise), got {self.budget_K}")
        if self.moment_estimator not in ESTIMATORS:
            raise ValueError(f"mmpo: moment_estimator must be one of {ESTIMATORS}, got '{self.moment_estimator}'")
        if any(c < 0 for c in self.moment_weights):
            raise ValueError(f"mmpo: moment_weights must be >= 0, got {self.moment_weights}")
        if self.moment_weights and self.budget_K and len(self.moment_weights) != self.budget_K - 1:
            raise ValueError(f"mmpo: moment_weights needs K−1 = {self.budget_K - 1} entries, "
                             f"got {len(self.moment_weights)}")


@register("advantage", "mmpo")
class MMPO(AdvantageEstimator):
    """Multi-moment policy optimization: Dr. GRPO advantages up-weighted on hard prompts.

    Each prompt's centred rewards are scaled by the gradient weight of the expected time to first
    success truncated at K.

    Paper: MMPO, multi-moment policy optimization (seed abstract, docs/methods.md §2.15; arXiv id unknown).
    Objective ``J = E_x Σ_{m=1}^{K−1} c_m f_x^m`` with ``f_x = 1 − p_x`` (for c_m = 1 it is
    ``E[min(T, K)] − 1``); the gradient identity is DERIVED, and the estimator of the moments, the
    weights c_m and the reading of non-binary rewards are a RECONSTRUCTION (Config options).

    Equation: ``A_i = w_x · (r_i − p̂_x)``, ``w_x = Σ_{m=1}^{K−1} c_m · m · f̂_x^(m−1)``, with the
    unbiased moment ``f̂^(j) = C(n − k, j)/C(n, j) = Π_{l<j} (n − k − l)/(n − l)`` from k successes
    among the n rows of the group ('leave_one_out': from the other n − 1 rows, k − r_i successes).
    Rewards in [0, 1] are read as success probabilities: k = Σ r, each factor clamped at 0, which
    is exact for binary rewards.

    Differs from dr_grpo:
      * each prompt's centred rewards are multiplied by w_x ≥ 1, growing with the failure rate
        (k = 1 of 8, K = 8 → 14; k = 7 of 8 → 1.25); K = 2 gives w ≡ 1, i.e. dr_grpo;
      * rewards must lie in [0, 1]; a group needs at least K − 2 rows (K − 1 for leave-one-out);
      * a group of one row gets A = 0 (dr_grpo keeps its raw score).

    Shapes: rewards (N, K_obj) or token_rewards (N, T), group_ids (N,) → advantages (N, T).
    """

    Config = MMPOConfig
    paper = "MMPO: multi-moment policy optimization (arXiv id unknown; seed abstract)"

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        cfg = self.config
        if cfg.budget_K == 0:
            raise BatchError("mmpo: budget_K is required (>= 2); set it in the preset or with advantage.budget_K")
        scores = sequence_scores(inputs)  # (N,)
        if scores.numel() and (bool((scores < 0).any()) or bool((scores > 1).any())):
            raise BatchError(f"mmpo: rewards must lie in [0, 1] (success probabilities), got "
                             f"[{float(scores.min()):.4g}, {float(scores.max()):.4g}]")
        stats = group_stats(scores, inputs.group_ids, ddof=0)
        r = scores.double()  # (N,) exact sums: k must be an integer for binary rewards
        n = stats.count.double()  # (N,)
        successes = torch.zeros_like(r).index_add_(0, stats.index, r)[stats.index]  # (N,) k of the row's group
        p_hat = successes / n  # (N,)
        if cfg.moment_estimator == "leave_one_out":
            successes, n = successes - r, n - 1
        moments = failure_moments(successes, n, cfg.budget_K - 2)  # (N, K−1): f̂^(0..K−2)
        weight = moments @ self._coefficients().to(moments.device)  # (N,)
        adv = (weight * (r - p_hat)).to(scores.dtype)  # (N,)
        metrics = {"moment_weight_mean": weight.mean().float() if weight.numel() else torch.tensor(0.0),
                   "moment_weight_max": weight.max().float() if weight.numel() else torch.tensor(0.0)}
        return AdvantageOutput(broadcast_to_tokens(adv, inputs.mask), metrics=metrics)

    def _coefficients(self) -> Tensor:
        """(K−1,) m·c_m for m = 1..K−1: the factor of f̂^(m−1) in w_x."""
        k = self.config.budget_K
        c = torch.tensor(self.config.moment_weights or [1.0] * (k - 1), dtype=torch.float64)
        return c * torch.arange(1, k, dtype=torch.float64)


def failure_moments(successes: Tensor, n: Tensor, max_order: int) -> Tensor:
    """(N,), (N,) → (N, max_order + 1): unbiased ``f̂^(j) = Π_{l<j} max(n − k − l, 0)/(n − l)``.

    For integer k this is ``C(n − k, j)/C(n, j)`` (sampling j of the n rows without replacement,
    the chance that all fail), whose mean under k ~ Binomial(n, p) is ``(1 − p)^j``. Needs j ≤ n.
    """
    if max_order > 0 and n.numel() and float(n.min()) < max_order:
        raise BatchError(f"mmpo: a group has {int(n.min())} usable rows, but moments up to order {max_order} "
                         f"need at least {max_order}; lower budget_K or sample more rows per prompt")
    out = [torch.ones_like(n)]
    for l in range(max_order):
        out.append(out[-1] * (n - successes - l).clamp(min=0) / (n - l))
    return torch.stack(out, dim=1)
