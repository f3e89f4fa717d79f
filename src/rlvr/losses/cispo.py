"""CISPO: REINFORCE with a clipped, detached importance weight (MiniMax-M1)."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.losses.base import PolicyLoss, approx_kl, log_ratio, masked_fraction
from rlvr.registry import param, register
from rlvr.types import LossInputs, LossOutput


@dataclass(frozen=True)
class CISPOConfig:
    eps_low: float = param(0.2, "the weight is clipped below at 1 - eps_low (verl: the actor's clip_ratio_low, "
                                "0.2); 1.0 removes the lower bound, as the paper does")
    eps_high: float = param(0.2, "the weight is clipped above at 1 + eps_high (verl: clip_ratio_high, 0.2)")
    log_ratio_clamp: float | None = param(20.0, "clamp log pi - log pi_old to +-this before exp (verl: 20)")

    def __post_init__(self) -> None:
        if not 0.0 <= self.eps_low <= 1.0 or self.eps_high < 0.0:
            raise ValueError(f"cispo: need 0 <= eps_low <= 1 and eps_high >= 0, got {self.eps_low}, {self.eps_high}")


@register("loss", "cispo")
class CISPO(PolicyLoss):
    """Clipped IS-weight Policy Optimization: every token keeps a gradient, its weight is clipped.

    Paper: MiniMax, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention"
    (arXiv:2506.13585); verl ``compute_policy_loss_cispo``.

    Equation: ``ℓ = −sg(clip(ρ, 1 − eps_low, 1 + eps_high)) · A · log π``, with
    ``ρ = exp(clamp(log π − log π_old, ±20))``; gradient ``−clip(ρ)·A·∇log π``.

    Differs from ppo_clip:
      * the clip acts on a detached weight, so a clipped token still gets a (bounded) gradient
        instead of none — rare "fork" tokens keep contributing;
      * the per-token value is a weighted log-prob, not a ratio (only its gradient is meaningful).

    Metrics: ``clipfrac`` (tokens whose weight was clipped), ``approx_kl``.
    Shapes: logprobs, old_logprobs, advantages, mask (N, T) → per_token (N, T).
    """

    ratio_clipped = True  # rlvr.train.async_check: lagged rows are safe against the rollout log-probs
    Config = CISPOConfig
    needs_every_row = False  # ℓ = −sg(w)·A·log π: zero value and gradient where A = 0
    paper = "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention (arXiv:2506.13585)"

    def __call__(self, inputs: LossInputs) -> LossOutput:
        cfg, mask = self.config, inputs.mask
        lr = log_ratio(inputs, cfg.log_ratio_clamp)  # (N, T)
        ratio = lr.exp()
        weight = ratio.clamp(1.0 - cfg.eps_low, 1.0 + cfg.eps_high).detach()  # (N, T)
        loss = -weight * inputs.advantages * inputs.logprobs
        metrics = {"clipfrac": masked_fraction(ratio != weight, mask), "approx_kl": approx_kl(lr, mask)}
        return LossOutput(per_token=loss, metrics=metrics)
