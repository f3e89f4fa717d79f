"""RLOO: the leave-one-out group baseline."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput, sequence_scores
from rlvr.ops import broadcast_to_tokens, group_stats
from rlvr.registry import param, register
from rlvr.types import AdvantageInputs


@dataclass(frozen=True)
class RLOOConfig:
    singleton: str = param("raw", "a group of one row has no other rows: 'raw' gives A = score "
                                  "(verl), 'zero' gives A = 0 (TRL)")

    def __post_init__(self) -> None:
        if self.singleton not in ("raw", "zero"):
            raise ValueError(f"rloo: singleton must be 'raw' or 'zero', got '{self.singleton}'")


@register("advantage", "rloo")
class RLOO(AdvantageEstimator):
    """Leave-one-out baseline: each row's score minus the mean score of the other rows of its group.

    Paper: Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
    from Human Feedback in LLMs" (arXiv:2402.14740); verl ``compute_rloo_outcome_advantage``.

    Equation: ``A_i = s_i − (Σ_{j∈g, j≠i} s_j)/(n_g − 1) = n_g/(n_g − 1) · (s_i − mean_g(s))``,
    the same value on every trained token of row i.

    Differs from grpo:
      * the baseline excludes the row itself, so it is independent of the row's own sample
        (an unbiased REINFORCE baseline);
      * no division by a standard deviation.

    Shapes: rewards (N, K) or token_rewards (N, T), group_ids (N,) → advantages (N, T).
    """

    Config = RLOOConfig
    paper = ("Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human "
             "Feedback in LLMs (arXiv:2402.14740)")

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        scores = sequence_scores(inputs)  # (N,)
        stats = group_stats(scores, inputs.group_ids, ddof=1)
        n = stats.count  # (N,)
        single = n == 1
        # n/(n−1)·(s − mean) is the leave-one-out form; singletons keep their raw score (verl).
        adv = torch.where(single, scores, (scores - stats.mean) * n / (n - 1).clamp(min=1))  # (N,)
        if self.config.singleton == "zero":
            adv = torch.where(single, torch.zeros_like(adv), adv)
        return AdvantageOutput(broadcast_to_tokens(adv, inputs.mask))
