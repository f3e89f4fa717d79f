"""UP: positive advantages get an unclipped, IS-free gradient; negative ones keep the base clip."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from rlvr.losses.base import PolicyLoss, masked_fraction
from rlvr.losses.gspo import GSPO, GSPOConfig
from rlvr.losses.ppo_clip import PPOClip, PPOClipConfig
from rlvr.registry import param, register
from rlvr.types import LossInputs, LossOutput

LEVELS = ("token", "sequence")
# The base losses' own defaults, used when eps_low / eps_high are None.
_DEFAULT_EPS = {"token": (0.2, 0.2), "sequence": (3e-4, 4e-4)}


@dataclass(frozen=True)
class UPConfig:
    level: str = param("token", "'token': per-token ratio, negatives clipped as ppo_clip (GRPO/DAPO); "
                                "'sequence': negatives clipped on the GSPO sequence ratio")
    unbounded_positive: bool = param(True, "A > 0 tokens get -A*exp(log pi - sg(log pi)) (no ratio, no clip); "
                                           "False = the base loss everywhere (ppo_clip or gspo)")
    eps_low: float | None = param(None, "lower clip of the base; None = base default (0.2 token, 3e-4 sequence)")
    eps_high: float | None = param(None, "upper clip of the base (only used for A > 0 when unbounded_positive is "
                                         "False); None = base default (0.2 token, 4e-4 sequence; DAPO 0.28)")
    clip_ratio_c: float | None = param(None, "token level only: ppo_clip's dual clip for A < 0; None = off")
    log_ratio_clamp: float | None = param(20.0, "token level: clamp log pi - log pi_old to +-this before exp "
                                                "(ppo_clip, verl 20); None = no clamp")
    log_ratio_max: float = param(10.0, "sequence level: upper clamp on the token-form log s (gspo, verl 10)")

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"up: level must be one of {LEVELS}, got '{self.level}'")
        if self.level == "sequence" and self.clip_ratio_c is not None:
            raise ValueError("up: clip_ratio_c (dual clip) exists only at level 'token'")
        self.base_config()  # validates the clip ranges through the base's own checks

    def base_config(self) -> PPOClipConfig | GSPOConfig:
        """The config of the base loss (ppo_clip or gspo) that UP applies to A <= 0 tokens."""
        default_low, default_high = _DEFAULT_EPS[self.level]
        low = default_low if self.eps_low is None else self.eps_low
        high = default_high if self.eps_high is None else self.eps_high
        if self.level == "token":
            return PPOClipConfig(eps_low=low, eps_high=high, clip_ratio_c=self.clip_ratio_c,
                                 log_ratio_clamp=self.log_ratio_clamp)
        return GSPOConfig(eps_low=low, eps_high=high, log_ratio_max=self.log_ratio_max)


@register("loss", "up")
class UnboundedPositive(PolicyLoss):
    """Unbounded Positive (UP): the stop-gradient anchor for A > 0, the base clip for A ≤ 0.

    Paper: "UP — Unbounded Positive asymmetric optimization" (seed abstract, arXiv id unknown);
    docs/methods.md §2.27. The abstract gives no formula; the equation below is DERIVED from its
    "anchoring to the current policy via the stop-gradient operator" and matches the UP-GRPO
    blog's "positive advantages drop IS and clipping" (SECONDARY).

    Equation, per token (``sg`` = stop-gradient, ``base`` = ppo_clip or gspo):
      A > 0:  ``ℓ_t = −A·exp(log π_t − sg(log π_t))``  — value −A, gradient ``−A·∇log π_t``
              for any ratio (no importance weight, no clip);
      A ≤ 0:  ``ℓ_t = base(ρ)``: ``level='token'`` → ppo_clip's ``max(−A·ρ_t, −A·clip(ρ_t))`` with
              ``ρ_t = exp(log π_t − log π_old,t)``; ``level='sequence'`` → gspo's clip on the
              sequence ratio ``s_i = exp(mean_t(log π − log π_old))``.
    At the sequence level the positive branch is the token form of
    ``s_i = exp(mean_t log π − sg(mean_t log π))`` (value 1, gradient ``∇ mean_t log π``) under
    ``seq-mean-token-mean``, so both levels share it. Aggregation is the base's (a separate knob).

    Differs from ppo_clip (gspo at level 'sequence'):
      * A > 0 tokens are never clipped and carry no importance ratio: their gradient is
        ``−A·∇log π`` even where ρ ≫ 1 + eps_high (where ppo_clip gives 0);
      * their loss value is −A, not −A·ρ (the anchor is the current policy, not π_old);
      * A ≤ 0 tokens are exactly the base loss; on-policy (ρ = 1) UP equals the base in value
        and gradient; ``unbounded_positive=False`` returns the base loss unchanged.

    Metrics: ``clipfrac`` (A ≤ 0 tokens the base clips), ``clipfrac_lower`` (dual clip, token level),
    ``approx_kl``, ``pos_unclipped_frac`` (A > 0 tokens the base would have clipped: the update
    budget UP keeps).

    Shapes: logprobs, old_logprobs, advantages, mask (N, T) → per_token (N, T).
    """

    Config = UPConfig
    needs_every_row = False  # −A·anchor or the base (ppo_clip / gspo): zero where A = 0
    paper = "UP: Unbounded Positive asymmetric optimization (arXiv id unknown; seed abstract)"

    def __init__(self, config: UPConfig | None = None) -> None:
        super().__init__(config)
        base_cfg = self.config.base_config()
        self.base: PolicyLoss = PPOClip(base_cfg) if self.config.level == "token" else GSPO(base_cfg)

    def __call__(self, inputs: LossInputs) -> LossOutput:
        if not self.config.unbounded_positive:
            return self.base(inputs)
        adv, mask = inputs.advantages, inputs.mask
        positive = adv > 0  # (N, T)
        zero = torch.zeros_like(adv)
        # The base on the A <= 0 tokens only (A = 0 elsewhere), so its clip metrics count them alone.
        negative_out = self.base(dataclasses.replace(inputs, advantages=torch.where(positive, zero, adv)))
        logp = inputs.logprobs
        anchored = torch.exp(logp - logp.detach())  # (N, T): value 1, gradient ∇log π
        loss = torch.where(positive, -adv * anchored, negative_out.per_token)
        metrics = dict(negative_out.metrics)
        with torch.no_grad():  # what the base would have clipped among A > 0 tokens
            would = self.base(dataclasses.replace(inputs, logprobs=logp.detach(),
                                                  advantages=torch.where(positive, adv, zero)))
        metrics["pos_unclipped_frac"] = would.metrics["clipfrac"]
        metrics["pos_frac"] = masked_fraction(positive, mask)
        return LossOutput(per_token=loss, metrics=metrics)
