"""GDPO: normalise each reward objective within its group, sum with weights, whiten over the batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput
from rlvr.advantages.grpo import GRPO, GRPOConfig
from rlvr.advantages.whitening import batch_mean, batch_std, moment_sums, whiten
from rlvr.ops import broadcast_to_tokens
from rlvr.registry import param, register
from rlvr.types import AdvantageInputs

WHITEN_MODES = ("tokens", "sequences", "none")


@dataclass(frozen=True)
class GDPOConfig:
    norm_by_std: bool = param(True, "divide each objective's group-centred reward by its group std "
                                    "(verl norm_adv_by_std_in_grpo)")
    ddof: int = param(1, "group std estimator: 1 = unbiased (verl, TRL), 0 = population")
    eps: float = param(1e-6, "added to the group std before dividing (verl 1e-6, TRL 1e-4)")
    whiten: str = param("tokens", "batch normalisation of the weighted sum: 'tokens' = over all trained "
                                  "tokens, eps inside the root (verl); 'sequences' = one value per row, "
                                  "eps added to the std (TRL normalize_then_sum); 'none'")
    whiten_ddof: int = param(1, "variance estimator of the batch normalisation: 1 = unbiased (verl, TRL)")
    whiten_eps: float = param(1e-8, "eps of the batch normalisation (verl 1e-8 inside the root; TRL 1e-4 on the std)")

    def __post_init__(self) -> None:
        if self.whiten not in WHITEN_MODES:
            raise ValueError(f"gdpo: whiten must be one of {WHITEN_MODES}, got '{self.whiten}'")


@register("advantage", "gdpo")
class GDPO(AdvantageEstimator):
    """Decoupled multi-reward normalisation: GRPO per objective, weighted sum, batch whitening.

    Paper: "GDPO: Group reward-Decoupled Normalization Policy Optimization" (arXiv:2601.05242);
    verl ``compute_gdpo_outcome_advantage``.

    Equation: ``a_ik = (r_ik − mean_g(r_k))/(std_g(r_k) + eps)`` (a group of one row: mean 0,
    std 1, as grpo), ``a_i = Σ_k w_k a_ik``, ``A = whiten(a)`` over the batch.

    Differs from grpo:
      * each column of ``rewards (N, K)`` is normalised on its own before the objectives are
        combined, so an objective with a large spread cannot drown the others;
      * weights default to 1 for every objective (not "objective 0 only");
      * ``token_rewards`` are not used (they hold a single objective);
      * the weighted sum is whitened over the batch (token-weighted, verl) before use; under data
        parallelism over the global batch (``batch_stats``: Σ, Σ² and count summed over ranks).

    Shapes: rewards (N, K), reward_weights (K,), group_ids (N,) → advantages (N, T).
    """

    Config = GDPOConfig
    paper = "GDPO: Group reward-Decoupled Normalization Policy Optimization (arXiv:2601.05242)"

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        return AdvantageOutput(self._whiten(self._total(inputs), inputs.mask, inputs.global_stats))

    def batch_stats(self, inputs: AdvantageInputs) -> dict[str, Tensor]:
        """Σ, Σ² and count of the weighted sums (over trained tokens, or over rows with
        ``whiten='sequences'``): the global batch normalisation."""
        if self.config.whiten == "none":
            return {}
        total = self._total(inputs)  # (N,)
        if self.config.whiten == "tokens":
            return moment_sums(broadcast_to_tokens(total, inputs.mask), inputs.mask)
        return moment_sums(total)

    def _total(self, inputs: AdvantageInputs) -> Tensor:
        """(N,) Σ_k w_k a_ik: each objective group-normalised by grpo, then weighted."""
        cfg = self.config
        rewards = inputs.rewards  # (N, K)
        n, k = rewards.shape
        weights = torch.ones(k) if inputs.reward_weights is None else inputs.reward_weights
        weights = weights.to(device=rewards.device, dtype=torch.float32)  # (K,)
        grpo = GRPO(GRPOConfig(scale="group" if cfg.norm_by_std else "none", ddof=cfg.ddof, eps=cfg.eps))
        one_token = torch.ones(n, 1, dtype=torch.bool, device=rewards.device)  # (N, 1): one value per row
        total = torch.zeros(n, dtype=torch.float32, device=rewards.device)  # (N,)
        for j in range(k):
            column = AdvantageInputs(rewards=rewards[:, j:j + 1], mask=one_token, group_ids=inputs.group_ids)
            total = total + weights[j] * grpo(column).advantages[:, 0]
        return total

    def _whiten(self, total: Tensor, mask: Tensor, sums: dict[str, Tensor] | None) -> Tensor:
        """(N,) weighted sums → (N, T) advantages, normalised over the (global, with ``sums``) batch."""
        cfg = self.config
        if cfg.whiten == "tokens":  # token-weighted: long rows count more (verl)
            return whiten(broadcast_to_tokens(total, mask), mask, cfg.whiten_ddof, cfg.whiten_eps, sums) * mask
        if cfg.whiten == "sequences":  # one value per row, length-independent (TRL)
            std = batch_std(total, cfg.whiten_ddof, sums)
            total = (total - batch_mean(total, sums)) / (std + cfg.whiten_eps)
        return broadcast_to_tokens(total, mask)
