"""Generalized Advantage Estimation with a critic (PPO's estimator, as in verl)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput, outcome_token_rewards
from rlvr.advantages.whitening import moment_sums, whiten
from rlvr.registry import param, register
from rlvr.types import AdvantageInputs, BatchError

RETURN_TARGETS = ("gae", "mc")


@dataclass(frozen=True)
class GAEConfig:
    gamma: float = param(1.0, "discount factor γ (verl default 1.0)")
    lam: float = param(1.0, "GAE λ: 0 = one-step TD error, 1 = Monte-Carlo return minus V (verl default 1.0)")
    whiten: bool = param(True, "whiten the advantages over the batch's trained tokens (verl does)")
    whiten_ddof: int = param(1, "variance estimator of the whitening: 1 = unbiased (verl), 0 = population")
    whiten_eps: float = param(1e-8, "added to the variance inside the square root when whitening (verl 1e-8)")
    returns: str = param("gae", "value targets: 'gae' = A(γ, λ) + V (verl), 'mc' = A(γ, λ=1) + V, "
                                "the discounted return-to-go (golden_critic's second pass)")

    def __post_init__(self) -> None:
        if self.returns not in RETURN_TARGETS:
            raise ValueError(f"gae: returns must be one of {RETURN_TARGETS}, got '{self.returns}'")


def gae_recursion(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> Tensor:
    """Un-whitened GAE (N, T) from rewards (N, T), values (N, T) and a bool mask (N, T).

    Backwards over t: ``δ_t = r_t + γ V_next − V_t``, ``A_t = δ_t + γλ A_next``. At an untrained
    position the recursion skips the token: ``V_next`` and ``A_next`` carry through unchanged (so
    rewards and values there are ignored). Untrained positions of the output are 0.
    """
    m = mask.to(rewards.dtype)
    next_value = torch.zeros_like(rewards[:, 0])  # (N,)
    next_adv = torch.zeros_like(rewards[:, 0])  # (N,)
    out = torch.zeros_like(rewards)  # (N, T)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * next_adv
        next_value = torch.where(mask[:, t], values[:, t], next_value)
        next_adv = torch.where(mask[:, t], adv_t, next_adv)
        out[:, t] = adv_t * m[:, t]
    return out


@register("advantage", "gae")
class GAE(AdvantageEstimator):
    """Generalized Advantage Estimation from token rewards and critic values.

    Paper: Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage
    Estimation" (arXiv:1506.02438); verl ``compute_gae_advantage_return``.

    Equation: ``δ_t = r_t + γ V_{t+1} − V_t``, ``A_t = Σ_l (γλ)^l δ_{t+l}`` over trained tokens
    (untrained ones are skipped, values and accumulators carried through); returns
    ``R_t = A_t + V_t`` (before whitening); then, by default, ``A ← (A − mean)/sqrt(var + eps)``
    over all trained tokens of the batch (the global batch under data parallelism: ``batch_stats``
    gives Σ, Σ² and the count, summed over ranks).

    Differs from REINFORCE with a baseline:
      * a learned per-token baseline V(s_t) instead of a per-prompt one;
      * λ trades bias (λ → 0, bootstrapped) for variance (λ → 1, Monte-Carlo);
      * needs ``values``; when ``token_rewards`` is None the outcome score sits on each row's
        last trained token (verl's convention).

    Shapes: values (N, T), token_rewards (N, T) or rewards (N, K), mask (N, T) →
    advantages (N, T), returns (N, T), both 0 on untrained tokens.
    """

    Config = GAEConfig
    mechanism_inputs = (("values",),)  # critic values V(s_t)
    paper = "High-Dimensional Continuous Control Using Generalized Advantage Estimation (arXiv:1506.02438)"

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        cfg = self.config
        rewards, values, raw = self._raw(inputs)  # (N, T) each
        mask = inputs.mask
        target = raw if cfg.returns == "gae" or cfg.lam == 1.0 else gae_recursion(rewards, values, mask, cfg.gamma, 1.0)
        returns = (target + values) * mask
        adv = raw
        if cfg.whiten:
            adv = whiten(raw, mask, cfg.whiten_ddof, cfg.whiten_eps, inputs.global_stats) * mask
        metrics = {"returns_mean": returns[mask].mean() if mask.any() else torch.tensor(0.0)}
        return AdvantageOutput(adv, returns=returns, metrics={k: v.detach() for k, v in metrics.items()})

    def batch_stats(self, inputs: AdvantageInputs) -> dict[str, Tensor]:
        """Σ, Σ² and count of the un-whitened advantages over trained tokens: the global whitening."""
        return moment_sums(self._raw(inputs)[2], inputs.mask) if self.config.whiten else {}

    def _raw(self, inputs: AdvantageInputs) -> tuple[Tensor, Tensor, Tensor]:
        """(rewards, values, un-whitened advantages), each (N, T)."""
        if inputs.values is None:
            raise BatchError("gae needs critic values: AdvantageInputs.values (N, T) is None")
        rewards = outcome_token_rewards(inputs)  # (N, T)
        values = inputs.values.to(rewards.dtype)  # (N, T)
        return rewards, values, gae_recursion(rewards, values, inputs.mask, self.config.gamma, self.config.lam)
