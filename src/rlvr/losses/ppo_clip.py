"""PPO's clipped surrogate per token, with clip-higher and an optional dual clip."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.losses.base import PolicyLoss, approx_kl, log_ratio, masked_fraction
from rlvr.registry import param, register
from rlvr.types import LossInputs, LossOutput


@dataclass(frozen=True)
class PPOClipConfig:
    eps_low: float = param(0.2, "lower clip range: the ratio is clipped below at 1 - eps_low")
    eps_high: float = param(0.2, "upper clip range: clipped above at 1 + eps_high (DAPO clip-higher: 0.28)")
    clip_ratio_c: float | None = param(None, "dual clip for A < 0: the loss is capped at -c*A (verl uses 3.0); "
                                             "None = off")
    log_ratio_clamp: float | None = param(20.0, "clamp log pi - log pi_old to +-this before exp (verl: 20); "
                                                "None = no clamp (TRL)")

    def __post_init__(self) -> None:
        if not 0.0 <= self.eps_low <= 1.0 or self.eps_high < 0.0:
            raise ValueError(f"ppo_clip: need 0 <= eps_low <= 1 and eps_high >= 0, got {self.eps_low}, {self.eps_high}")
        if self.clip_ratio_c is not None and self.clip_ratio_c <= 1.0:
            raise ValueError(f"ppo_clip: clip_ratio_c must be > 1 (or None), got {self.clip_ratio_c}")
        if self.log_ratio_clamp is not None and self.log_ratio_clamp <= 0:
            raise ValueError(f"ppo_clip: log_ratio_clamp must be > 0 (or None), got {self.log_ratio_clamp}")


@register("loss", "ppo_clip")
class PPOClip(PolicyLoss):
    """Clipped importance-ratio surrogate per token (PPO), with asymmetric clip and dual clip.

    Paper: Schulman et al., "Proximal Policy Optimization Algorithms" (arXiv:1707.06347);
    clip-higher from DAPO (arXiv:2503.14476); dual clip from Ye et al. (arXiv:1912.09729);
    verl ``compute_policy_loss_vanilla``.

    Equation, with ``ρ = exp(clamp(log π − log π_old, ±20))``:
      ``ℓ = max(−A·ρ, −A·clip(ρ, 1 − eps_low, 1 + eps_high))``;
      dual clip (``clip_ratio_c = c``), only where A < 0: ``ℓ = min(ℓ, −c·A)``.

    Differs from REINFORCE (``ℓ = −A·log π``):
      * the importance ratio to the behaviour policy replaces log π (same gradient on-policy);
      * a ratio pushed past the clip range in the direction A favours gets no gradient;
      * ``eps_high > eps_low`` (clip-higher) leaves more room to raise unlikely tokens;
      * the dual clip bounds the loss of a negative-advantage token whose ratio exploded.

    Metrics: ``clipfrac`` (tokens where the clipped term is the larger), ``clipfrac_lower``
    (tokens where the dual clip binds), ``approx_kl`` (mean of log π_old − log π).

    Shapes: logprobs, old_logprobs, advantages, mask (N, T) → per_token (N, T).
    """

    ratio_clipped = True  # rlvr.train.async_check: lagged rows are safe against the rollout log-probs
    Config = PPOClipConfig
    needs_every_row = False  # ℓ = max(−A·ρ, −A·clip(ρ)): zero value and gradient where A = 0
    paper = "Proximal Policy Optimization Algorithms (arXiv:1707.06347)"

    def __call__(self, inputs: LossInputs) -> LossOutput:
        cfg, mask, adv = self.config, inputs.mask, inputs.advantages
        lr = log_ratio(inputs, cfg.log_ratio_clamp)  # (N, T)
        ratio = lr.exp()
        unclipped = -adv * ratio  # (N, T)
        clipped = -adv * ratio.clamp(1.0 - cfg.eps_low, 1.0 + cfg.eps_high)
        loss = torch.maximum(unclipped, clipped)  # pessimistic bound
        metrics = {"clipfrac": masked_fraction(clipped > unclipped, mask), "approx_kl": approx_kl(lr, mask)}
        if cfg.clip_ratio_c is not None:
            cap = -adv * cfg.clip_ratio_c  # (N, T), positive where A < 0
            negative = adv < 0
            metrics["clipfrac_lower"] = masked_fraction((loss > cap) & negative, mask)
            loss = torch.where(negative, torch.minimum(loss, cap), loss)
        return LossOutput(per_token=loss, metrics=metrics)
