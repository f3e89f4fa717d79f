"""GSPO: one length-normalised importance ratio per sequence, clipped like PPO."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.losses.base import PolicyLoss, approx_kl, log_ratio, masked_fraction
from rlvr.ops import masked_sum
from rlvr.registry import param, register
from rlvr.types import LossInputs, LossOutput


@dataclass(frozen=True)
class GSPOConfig:
    eps_low: float = param(3e-4, "lower clip range of the sequence ratio (paper ~3e-4; unverified default)")
    eps_high: float = param(4e-4, "upper clip range of the sequence ratio (paper ~4e-4; unverified default)")
    log_ratio_max: float = param(10.0, "upper clamp on the token-form log-ratio before exp (verl: 10)")

    def __post_init__(self) -> None:
        if not 0.0 <= self.eps_low <= 1.0 or self.eps_high < 0.0:
            raise ValueError(f"gspo: need 0 <= eps_low <= 1 and eps_high >= 0, got {self.eps_low}, {self.eps_high}")


@register("loss", "gspo")
class GSPO(PolicyLoss):
    """Group Sequence Policy Optimization: the PPO clip applied to a per-sequence ratio.

    Paper: Zheng et al., "Group Sequence Policy Optimization" (arXiv:2507.18071); verl
    ``compute_policy_loss_gspo``.

    Equation: ``log s_i = Σ_t m_t (log π − log π_old) / L_i`` (the geometric-mean ratio), written per
    token as ``log s_{i,t} = sg(log s_i) + log π_t − sg(log π_t)`` (clamped at ``log_ratio_max``) so
    that ``∇ s_{i,t} = s_i ∇ log π_t``; then
    ``ℓ = max(−A·s_{i,t}, −A·clip(s_{i,t}, 1 − eps_low, 1 + eps_high))``.

    Differs from ppo_clip:
      * every token of a sequence shares the sequence's ratio and clip decision;
      * the ratio is length-normalised (a geometric mean), so clip ranges are ~1e-4, not 0.2;
      * no ±20 clamp on the token log-ratio (verl), only the upper clamp on log s.

    Pair with ``seq-mean-token-mean`` aggregation (the paper's sequence-level objective).
    Shapes: logprobs, old_logprobs, advantages, mask (N, T) → per_token (N, T).
    """

    ratio_clipped = True  # rlvr.train.async_check: lagged rows are safe against the rollout log-probs
    Config = GSPOConfig
    needs_every_row = False  # ℓ = max(−A·s, −A·clip(s)): zero value and gradient where A = 0
    paper = "Group Sequence Policy Optimization (arXiv:2507.18071)"

    def __call__(self, inputs: LossInputs) -> LossOutput:
        cfg, mask, adv = self.config, inputs.mask, inputs.advantages
        diff = log_ratio(inputs, None)  # (N, T)
        lengths = mask.sum(-1).clamp(min=1).to(diff.dtype)  # (N,)
        seq_log_ratio = masked_sum(diff, mask, dim=-1) / lengths  # (N,)
        logp = inputs.logprobs
        log_s = (logp - logp.detach() + seq_log_ratio.detach().unsqueeze(-1)).clamp(max=cfg.log_ratio_max)
        s = log_s.exp()  # (N, T): value s_i, gradient s_i ∇log π_t
        unclipped = -adv * s
        clipped = -adv * s.clamp(1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
        loss = torch.maximum(unclipped, clipped)
        metrics = {
            "clipfrac": masked_fraction(clipped > unclipped, mask),
            "approx_kl": approx_kl(diff, mask),
            "seq_ratio_mean": seq_log_ratio.detach().exp()[mask.any(-1)].mean()
            if bool(mask.any()) else torch.tensor(1.0),
        }
        return LossOutput(per_token=loss, metrics=metrics)
