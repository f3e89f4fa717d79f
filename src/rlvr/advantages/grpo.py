"""Group-relative advantages with the std dial: GRPO and Dr. GRPO."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput, sequence_scores
from rlvr.advantages.whitening import batch_std, moment_sums
from rlvr.ops import broadcast_to_tokens, group_stats
from rlvr.registry import param, register
from rlvr.types import AdvantageInputs

SCALES = ("group", "batch", "none")


@dataclass(frozen=True)
class GRPOConfig:
    scale: str = param("group", "divide the centred score by the group std ('group'), the batch std "
                                "of raw scores ('batch', TRL's scale_rewards='batch') or nothing ('none')")
    ddof: int = param(1, "std estimator: 1 = unbiased (verl, TRL), 0 = population")
    eps: float = param(1e-6, "added to the std before dividing (verl 1e-6, TRL 1e-4)")
    singleton: str = param("raw", "a group of one row: 'raw' uses mean 0, std 1 (verl: A = score), "
                                  "'zero' gives A = 0")
    std_power: float = param(1.0, "the std dial beta: divide by (std + eps)**beta; 1 = GRPO, 0 = Dr. GRPO "
                                  "(docs/methods.md §2.30); ignored when scale='none'")

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ValueError(f"grpo: scale must be one of {SCALES}, got '{self.scale}'")
        if self.std_power < 0:
            raise ValueError(f"grpo: std_power must be >= 0, got {self.std_power}")
        if self.singleton not in ("raw", "zero"):
            raise ValueError(f"grpo: singleton must be 'raw' or 'zero', got '{self.singleton}'")


@register("advantage", "grpo")
class GRPO(AdvantageEstimator):
    """Group-relative advantage: score minus group mean, divided by a std (the std dial).

    Paper: Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
    Language Models" (arXiv:2402.03300); verl ``compute_grpo_outcome_advantage``.

    Equation: ``A_i = (s_i − mean_g(s)) / (std_g(s) + eps)^β`` for every trained token of row i,
    with ``s_i`` the row's outcome score and g its group (``group_ids``, not assumed contiguous);
    ``β = std_power`` is the std dial of Bay & Yearick (arXiv:2607.00152, docs/methods.md §2.30): 1 = GRPO,
    0 = Dr. GRPO; for binary rewards the update is σ^(2−β)(ḡ⁺ − ḡ⁻) (``rlvr.analysis.std_dial``).

    Differs from REINFORCE with a baseline:
      * the baseline is the mean over the G completions of the same prompt;
      * the advantage is scaled by the group (or batch) std, unless ``scale='none'``;
      * ``std_power`` β ∈ [0, 1] interpolates the scaling between GRPO (1) and none (0).

    With ``scale='batch'`` the std is the global batch's under data parallelism (``batch_stats``).

    Shapes: rewards (N, K) or token_rewards (N, T), group_ids (N,) → advantages (N, T).
    """

    Config = GRPOConfig
    paper = "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models (arXiv:2402.03300)"

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        cfg = self.config
        scores = sequence_scores(inputs)  # (N,)
        stats = group_stats(scores, inputs.group_ids, ddof=cfg.ddof)
        single = stats.count == 1
        mean = torch.where(single, torch.zeros_like(stats.mean), stats.mean)
        centred = scores - mean  # (N,)
        if cfg.scale == "group":
            std = torch.where(single, torch.ones_like(stats.std), stats.std)
            adv = centred / (std + cfg.eps) ** cfg.std_power  # x**1.0 == x exactly: β=1 is plain GRPO
        elif cfg.scale == "batch":
            adv = centred / (batch_std(scores, cfg.ddof, inputs.global_stats) + cfg.eps) ** cfg.std_power
        else:
            adv = centred
        if cfg.singleton == "zero":
            adv = torch.where(single, torch.zeros_like(adv), adv)
        metrics = {"zero_std_frac": (stats.std[~single] == 0).float().mean() if (~single).any()
                   else torch.tensor(0.0)}
        return AdvantageOutput(broadcast_to_tokens(adv, inputs.mask), metrics=metrics)

    def batch_stats(self, inputs: AdvantageInputs) -> dict[str, Tensor]:
        """With ``scale='batch'``: Σ, Σ² and count of the rows' raw scores, for the global batch std."""
        return moment_sums(sequence_scores(inputs)) if self.config.scale == "batch" else {}


@dataclass(frozen=True)
class DrGRPOConfig(GRPOConfig):
    scale: str = param("none", "Dr. GRPO does not divide by a std; see grpo for the other values")


@register("advantage", "dr_grpo")
class DrGRPO(GRPO):
    """GRPO done right: the group-centred score without std scaling.

    Paper: Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective" (arXiv:2503.20783).

    Equation: ``A_i = s_i − mean_g(s)``.

    Differs from grpo:
      * ``scale='none'`` by default (no division by the group std);
      * pair it with ``seq-mean-token-sum-norm`` aggregation (the preset does) to drop 1/|o_i|.

    Shapes: as grpo.
    """

    Config = DrGRPOConfig
    paper = "Understanding R1-Zero-Like Training: A Critical Perspective (arXiv:2503.20783)"

