"""Length-adaptive GAE with Monte-Carlo value targets and no whitening (BPCO's estimator)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput, outcome_token_rewards
from rlvr.advantages.gae import gae_recursion
from rlvr.registry import param, register
from rlvr.types import AdvantageInputs, BatchError


@dataclass(frozen=True)
class LAGAEConfig:
    alpha: float = param(0.4, "α: per-sequence λ_i = 1 − 1/(α·L_i), an effective horizon of α·L_i tokens "
                              "(golden_critic reads it from algorithm.lam; default 0.4)")
    gamma: float = param(1.0, "discount factor γ (verl default 1.0)")
    clamp_lambda: bool = param(True, "λ_i = max(0, λ_i) for short rows (L_i < 1/α), counted in "
                                     "adv/lambda_clamped; False keeps the reference code's unclamped λ")

    def __post_init__(self) -> None:
        if self.alpha <= 0:
            raise ValueError(f"la_gae: alpha must be > 0, got {self.alpha}")


@register("advantage", "la_gae")
class LengthAdaptiveGAE(AdvantageEstimator):
    """GAE whose λ adapts to each response's length; Monte-Carlo returns; raw (unwhitened) advantages.

    Paper: "BPCO: Best-Practice Critic Optimization" (arXiv id unknown; seed abstract), code
    QPHutu/golden_critic ``compute_gae_advantage_return`` with ``adv_estimator = lagae``.

    Equation: ``λ_i = 1 − 1/(α·L_i)`` per row (clamped at 0 by default), ``δ_t = r_t + γV_{t+1} − V_t``,
    ``A_t = δ_t + γλ_i A_{t+1}`` over trained tokens (untrained ones skipped, values and accumulators
    carried through); value targets ``R_t = GAE(λ = 1)_t + V_t``, the reward-to-go.

    Differs from gae:
      * λ per sequence from its length, so every response bootstraps over ~α of its own length;
      * returns are Monte-Carlo (the λ = 1 pass), not A(λ) + V;
      * no whitening: advantages keep the reward's scale (BPCO, one response per prompt).

    Shapes: values (N, T), rewards (N, K) or token_rewards (N, T), mask (N, T) → advantages,
    returns (N, T), 0 on untrained tokens.
    """

    Config = LAGAEConfig
    mechanism_inputs = (("values",),)  # critic values V(s_t)
    paper = "BPCO: Best-Practice Critic Optimization (arXiv id unknown; seed abstract)"
    needs_values = True

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        cfg = self.config
        if inputs.values is None:
            raise BatchError("la_gae needs critic values: AdvantageInputs.values (N, T) is None")
        rewards = outcome_token_rewards(inputs)  # (N, T)
        values = inputs.values.to(rewards.dtype)  # (N, T)
        mask = inputs.mask
        lengths = mask.sum(-1).to(rewards.dtype)  # (N,)
        lam = 1.0 - 1.0 / (cfg.alpha * lengths.clamp(min=1))  # (N,)
        negative = (lam < 0) & (lengths > 0)
        if cfg.clamp_lambda:
            lam = lam.clamp(min=0.0)
        adv = gae_recursion(rewards, values, mask, cfg.gamma, lam)  # (N, T); λ broadcasts per row
        returns = (gae_recursion(rewards, values, mask, cfg.gamma, 1.0) + values) * mask
        rows = lengths > 0
        metrics = {"lambda_mean": lam[rows].mean() if rows.any() else torch.tensor(0.0),
                   "lambda_clamped": negative.sum().float()}
        return AdvantageOutput(adv, returns=returns, metrics={k: v.detach() for k, v in metrics.items()})
