"""Mixed on/off-policy surrogates: PPO-clip on on-policy tokens, truncated importance sampling on
tokens another policy or context produced (OC-GRPO's guided rows, ARMOR's reference anchors)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.losses.base import PolicyLoss, masked_fraction
from rlvr.losses.ppo_clip import PPOClip, PPOClipConfig
from rlvr.ops import masked_mean
from rlvr.registry import param, register
from rlvr.types import OFF_POLICY, BatchError, LossInputs, LossOutput

IS_MODES = ("truncated_is", "ppo_clip")


def off_policy_tokens(inputs: LossInputs) -> Tensor:
    """(N, T) bool: trained tokens whose behaviour policy is not pi_old (origin REFERENCE or GUIDED)."""
    if inputs.token_origin is None:
        return torch.zeros_like(inputs.mask)
    off = torch.zeros_like(inputs.mask)
    for origin in OFF_POLICY:
        off |= inputs.token_origin == int(origin)
    return off & inputs.mask


def behaviour_ratio(inputs: LossInputs, bound: float) -> Tensor:
    """(N, T) ``rho = exp(clamp(log pi_theta − behaviour, ±bound))`` (carries the gradient)."""
    if inputs.behaviour_logprobs is None:
        raise BatchError("off-policy tokens need behaviour_logprobs (the sampler that produced them sets it)")
    return (inputs.logprobs - inputs.behaviour_logprobs.detach()).clamp(-bound, bound).exp()


def truncated_is(logprobs: Tensor, ratio: Tensor, advantages: Tensor, cap: float) -> Tensor:
    """(N, T) ``−sg(min(rho, C))·A·log pi_theta``: REINFORCE weighted by the capped ratio."""
    return -ratio.detach().clamp(max=cap) * advantages * logprobs


@dataclass(frozen=True)
class OCGRPOConfig:
    eps_low: float = param(0.2, "PPO clip below (1 - eps_low) on on-policy tokens")
    eps_high: float = param(0.2, "PPO clip above (1 + eps_high) on on-policy tokens")
    is_mode: str = param("truncated_is", "off-context tokens: 'truncated_is' (-sg(min(rho, C))*A*log pi) or "
                                         "'ppo_clip' (PPO on rho with the wider `wide_eps`)")
    is_cap: float = param(2.0, "C: cap of the importance weight rho in truncated_is")
    wide_eps: float | None = param(None, "clip range of rho in is_mode 'ppo_clip' (required there)")
    log_ratio_clamp: float = param(20.0, "clamp log-ratios to +-this before exp")

    def __post_init__(self) -> None:
        if self.is_mode not in IS_MODES:
            raise ValueError(f"oc_grpo: unknown is_mode '{self.is_mode}'; valid: {', '.join(IS_MODES)}")
        if self.is_cap <= 0:
            raise ValueError(f"oc_grpo: is_cap must be > 0, got {self.is_cap}")
        if self.is_mode == "ppo_clip" and (self.wide_eps is None or self.wide_eps <= 0):
            raise ValueError("oc_grpo: is_mode 'ppo_clip' requires wide_eps > 0")


@register("loss", "oc_grpo")
class OCGRPOLoss(PolicyLoss):
    """OC-GRPO's importance-corrected objective for rollouts generated under a guided context.

    Paper: "OC-GRPO: Off-Context GRPO" (seed abstract; arXiv id unknown); the correction's form is a
    RECONSTRUCTION (docs/methods.md §2.19) after Guide-GRPO (arXiv:2506.13923).

    Equation, with ``rho = exp(log pi_theta(y_t|x, y_<t) − log pi_old(y_t|x, h, y_<t))`` (behaviour
    log-probs from the hint sampler):
      off-context tokens (origin GUIDED or REFERENCE): ``ℓ = −sg(min(rho, C))·A·log pi_theta``, or
      with ``is_mode: ppo_clip`` ``ℓ = max(−A·rho, −A·clip(rho, 1 ± wide_eps))``;
      on-policy tokens: PPO-clip against pi_old.

    Differs from ppo_clip:
      * tokens sampled under guidance are corrected toward the unguided prompt by a capped ratio;
      * with no off-policy tokens in the batch it equals ppo_clip exactly.
    Metrics: ``offpolicy_frac``, ``is_weight_mean``, ``is_capped_frac`` (off tokens), ``clipfrac``.

    Shapes: logprobs, old_logprobs, behaviour_logprobs, advantages, mask, token_origin (N, T) → (N, T).
    """

    Config = OCGRPOConfig
    mechanism_inputs = (("token_origin",),)  # which tokens are off-policy
    handles_off_policy = True
    needs_every_row = False  # PPO-clip and truncated IS, both −A times a finite factor
    paper = "OC-GRPO: Off-Context GRPO (seed abstract; arXiv id unknown)"

    def __call__(self, inputs: LossInputs) -> LossOutput:
        cfg = self.config
        return mixed_loss(inputs, cfg.eps_low, cfg.eps_high, cfg.log_ratio_clamp, cfg.is_cap,
                          wide_eps=cfg.wide_eps if cfg.is_mode == "ppo_clip" else None)


@dataclass(frozen=True)
class ARMORConfig:
    anchor_is_cap: float | None = param(None, "C: cap of rho_anc = pi_theta / pi_ref on anchor tokens (required)")
    anchor_positive_only: bool = param(False, "train anchors only where A > 0 (correct reference solutions are "
                                              "preserved, never pushed down)")
    eps_low: float = param(0.2, "PPO clip below (1 - eps_low) on on-policy tokens")
    eps_high: float = param(0.2, "PPO clip above (1 + eps_high) on on-policy tokens (DAPO: 0.28)")
    log_ratio_clamp: float = param(20.0, "clamp log-ratios to +-this before exp")

    def __post_init__(self) -> None:
        if self.anchor_is_cap is None or self.anchor_is_cap <= 0:
            raise ValueError(f"armor: anchor_is_cap is required and must be > 0, got {self.anchor_is_cap}")


@register("loss", "armor")
class ARMORLoss(PolicyLoss):
    """ARMOR's mixed optimisation: PPO-clip on policy rows, truncated IS on reference anchors.

    Paper: "ARMOR: Anchor Rollout + Mixed Optimization" (seed abstract; arXiv id unknown);
    RECONSTRUCTION (docs/methods.md §2.24). Use with the ``anchor`` sampler and ``kl_coef: 0`` (the
    anchors replace the KL term).

    Equation, with ``rho_anc = exp(log pi_theta − log pi_ref)`` on anchor tokens:
      anchor tokens: ``ℓ = −sg(min(rho_anc, C))·A·log pi_theta`` (0 where A ≤ 0 if positive-only);
      on-policy tokens: PPO-clip against pi_old.
    At pi_theta = pi_ref the anchor term is REINFORCE ``−A·log pi_theta`` on the anchors.

    Differs from ppo_clip:
      * reference samples enter the update with a capped importance weight instead of a KL penalty;
      * with no anchors (``anchors: 0``) it equals ppo_clip exactly.
    Metrics: ``offpolicy_frac``, ``is_weight_mean``, ``is_capped_frac``, ``clipfrac``.

    Shapes: as ppo_clip, plus token_origin and behaviour_logprobs (N, T).
    """

    Config = ARMORConfig
    mechanism_inputs = (("token_origin",),)  # which tokens are off-policy
    handles_off_policy = True
    needs_every_row = False  # PPO-clip and truncated IS, both −A times a finite factor
    paper = "ARMOR: Anchor Rollout + Mixed Optimization (seed abstract; arXiv id unknown)"

    def __call__(self, inputs: LossInputs) -> LossOutput:
        cfg = self.config
        return mixed_loss(inputs, cfg.eps_low, cfg.eps_high, cfg.log_ratio_clamp, cfg.anchor_is_cap,
                          positive_only=cfg.anchor_positive_only)


def mixed_loss(inputs: LossInputs, eps_low: float, eps_high: float, bound: float, cap: float, *,
               wide_eps: float | None = None, positive_only: bool = False) -> LossOutput:
    """PPO-clip where tokens are on-policy, importance-corrected where they are not (N, T)."""
    ppo_loss = PPOClip(PPOClipConfig(eps_low=eps_low, eps_high=eps_high, log_ratio_clamp=bound))
    off = off_policy_tokens(inputs)  # (N, T)
    zero = torch.zeros((), device=inputs.mask.device)
    if not bool(off.any()):
        out = ppo_loss(inputs)
        out.metrics.update({"offpolicy_frac": zero, "is_weight_mean": zero, "is_capped_frac": zero})
        return out
    on = inputs.mask & ~off
    ppo = ppo_loss(dataclasses.replace(inputs, mask=on))  # per-token values do not depend on the mask
    adv = inputs.advantages
    ratio = behaviour_ratio(inputs, bound)  # (N, T)
    if wide_eps is None:
        off_loss = truncated_is(inputs.logprobs, ratio, adv, cap)
    else:
        off_loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(1.0 - wide_eps, 1.0 + wide_eps))
    if positive_only:
        off_loss = torch.where(adv > 0, off_loss, torch.zeros_like(off_loss))
    loss = torch.where(off, off_loss, ppo.per_token)
    metrics = {**ppo.metrics, "offpolicy_frac": masked_fraction(off, inputs.mask),
               "is_weight_mean": masked_mean(ratio.detach().clamp(max=cap), off),
               "is_capped_frac": masked_fraction(ratio > cap, off)}
    return LossOutput(per_token=loss, metrics=metrics)
