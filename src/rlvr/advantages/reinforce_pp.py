"""REINFORCE++: discounted return-to-go whitened over the batch, and its group-baseline variant."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput, outcome_token_rewards, sequence_scores
from rlvr.advantages.gae import gae_recursion
from rlvr.advantages.whitening import moment_sums, whiten
from rlvr.ops import broadcast_to_tokens, group_stats
from rlvr.registry import param, register
from rlvr.types import AdvantageInputs

# Title of the paper's first version.
PAPER = "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models (arXiv:2501.03262)"


@dataclass(frozen=True)
class WhitenConfig:
    whiten_ddof: int = param(1, "variance estimator of the batch whitening: 1 = unbiased (verl), 0 = population")
    whiten_eps: float = param(1e-8, "added to the variance inside the square root when whitening (verl 1e-8)")


@dataclass(frozen=True)
class ReinforcePPConfig(WhitenConfig):
    gamma: float = param(1.0, "discount factor γ of the return-to-go (verl default 1.0)")


@register("advantage", "reinforce_pp")
class ReinforcePP(AdvantageEstimator):
    """REINFORCE++: per-token discounted return-to-go, whitened over every trained token of the batch.

    Paper: Hu et al., "REINFORCE++" (arXiv:2501.03262); verl
    ``compute_reinforce_plus_plus_outcome_advantage``.

    Equation: ``G_t = r_t + γ G_{t+1}`` over trained tokens (untrained ones skipped, the running
    return carried through), then ``A = (G − mean)/sqrt(var + eps)`` with mean and var over all
    trained tokens of the batch (the global batch under data parallelism, through ``batch_stats``).
    Returns: ``G`` (before whitening).

    Differs from grpo:
      * no per-prompt baseline: the batch-wide whitening is the only normalisation;
      * token-level: with γ < 1 earlier tokens get a smaller share of a final reward;
      * when ``token_rewards`` is None the outcome score sits on the last trained token (verl).

    Shapes: token_rewards (N, T) or rewards (N, K), mask (N, T) → advantages (N, T), returns (N, T).
    """

    Config = ReinforcePPConfig
    paper = PAPER

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        cfg = self.config
        returns = self._returns(inputs)  # (N, T)
        adv = whiten(returns, inputs.mask, cfg.whiten_ddof, cfg.whiten_eps, inputs.global_stats) * inputs.mask
        return AdvantageOutput(adv, returns=returns)

    def batch_stats(self, inputs: AdvantageInputs) -> dict[str, Tensor]:
        """Σ, Σ² and count of the returns over trained tokens: the global whitening."""
        return moment_sums(self._returns(inputs), inputs.mask)

    def _returns(self, inputs: AdvantageInputs) -> Tensor:
        """(N, T) return-to-go: GAE with V ≡ 0 and λ = 1 (same skipping of untrained tokens)."""
        rewards = outcome_token_rewards(inputs)  # (N, T)
        return gae_recursion(rewards, torch.zeros_like(rewards), inputs.mask, self.config.gamma, 1.0)


@register("advantage", "reinforce_pp_baseline")
class ReinforcePPBaseline(AdvantageEstimator):
    """REINFORCE++ with a group baseline: score minus group mean, whitened over the batch's tokens.

    Paper: Hu et al., "REINFORCE++" (arXiv:2501.03262); verl
    ``compute_reinforce_plus_plus_baseline_outcome_advantage``.

    Equation: ``a_i = s_i − mean_g(s)`` (a group of one row uses mean 0) on every trained token of
    row i, then ``A = (a − mean)/sqrt(var + eps)`` over all trained tokens of the batch.

    Differs from reinforce_pp:
      * sequence-level: the outcome score, not a discounted return-to-go (no ``gamma``);
      * the group mean is subtracted before the batch whitening.
    Differs from grpo: the std is the batch's (token-weighted), not the group's.

    Shapes: rewards (N, K) or token_rewards (N, T), group_ids (N,) → advantages (N, T).
    """

    Config = WhitenConfig
    paper = PAPER

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        cfg = self.config
        centred = self._centred(inputs)  # (N, T)
        adv = whiten(centred, inputs.mask, cfg.whiten_ddof, cfg.whiten_eps, inputs.global_stats) * inputs.mask
        return AdvantageOutput(adv)

    def batch_stats(self, inputs: AdvantageInputs) -> dict[str, Tensor]:
        """Σ, Σ² and count of the group-centred scores over trained tokens: the global whitening."""
        return moment_sums(self._centred(inputs), inputs.mask)

    @staticmethod
    def _centred(inputs: AdvantageInputs) -> Tensor:
        """(N, T) score minus group mean (0 for a group of one) on trained tokens."""
        scores = sequence_scores(inputs)  # (N,)
        stats = group_stats(scores, inputs.group_ids, ddof=1)
        mean = torch.where(stats.count == 1, torch.zeros_like(stats.mean), stats.mean)
        return broadcast_to_tokens(scores - mean, inputs.mask)
