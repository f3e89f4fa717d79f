"""DPPO: a binary trust region on the sampled token's probability (Binary-TV, Binary-KL)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.losses.base import PolicyLoss, approx_kl, log_ratio, masked_fraction
from rlvr.registry import param, register
from rlvr.types import LossInputs, LossOutput

SURROGATES = ("log_prob", "ratio")


@dataclass(frozen=True)
class DPPOConfig:
    delta_low: float = param(0.2, "divergence allowed when lowering a token's probability (A <= 0); verl reads "
                                  "it from the actor's clip_ratio_low (default 0.2)")
    delta_high: float = param(0.2, "divergence allowed when raising a token's probability (A > 0); verl's "
                                   "clip_ratio_high (default 0.2)")
    clip_ratio_c: float = param(20.0, "truncated-IS cap C on the detached ratio in the 'log_prob' surrogate "
                                      "(verl's fallback 20; note verl's ActorConfig default clip_ratio_c=3 overrides it)")
    surrogate: str = param("log_prob", "'log_prob': -A*sg(min(ratio, C))*log pi*valid (verl 0.9.1); "
                                       "'ratio': -A*ratio*valid (golden_critic); same gradient while ratio <= C")
    log_ratio_clamp: float = param(20.0, "clamp log pi - log pi_old to +-this before exp (verl: 20)")

    def __post_init__(self) -> None:
        if self.delta_low < 0 or self.delta_high < 0:
            raise ValueError(f"dppo: deltas must be >= 0, got {self.delta_low}, {self.delta_high}")
        if self.surrogate not in SURROGATES:
            raise ValueError(f"dppo: surrogate must be one of {SURROGATES}, got '{self.surrogate}'")
        if self.clip_ratio_c <= 0:
            raise ValueError(f"dppo: clip_ratio_c must be > 0, got {self.clip_ratio_c}")


@dataclass(frozen=True)
class DPPOKLConfig(DPPOConfig):
    eps: float = param(1e-8, "added inside log((1 - p_old + eps) / (1 - p + eps)) of the binary KL (verl 1e-8)")


class _DPPO(PolicyLoss, ABC):
    """Shared body: the surrogate times a detached validity mask; subclasses define the mask."""

    needs_every_row = False  # −A times a finite factor times the mask: zero where A = 0

    @abstractmethod
    def _valid(self, prob: Tensor, old_prob: Tensor, inputs: LossInputs) -> Tensor:
        """(N, T) bool: tokens still inside the trust region (dppo_tv / dppo_kl define it)."""

    def __call__(self, inputs: LossInputs) -> LossOutput:
        cfg, mask, adv = self.config, inputs.mask, inputs.advantages
        lr = log_ratio(inputs, cfg.log_ratio_clamp)  # (N, T)
        ratio = lr.exp()
        with torch.no_grad():
            valid = self._valid(inputs.logprobs.exp(), inputs.old_logprobs.exp(), inputs)  # (N, T) bool
        if cfg.surrogate == "log_prob":
            weight = ratio.detach().clamp(max=cfg.clip_ratio_c)  # truncated importance weight
            loss = -adv * weight * inputs.logprobs * valid
        else:
            loss = -adv * ratio * valid
        metrics = {
            "clipfrac": masked_fraction(~valid, mask),
            "clipfrac_lower": masked_fraction((ratio > cfg.clip_ratio_c) & valid, mask),
            "approx_kl": approx_kl(lr, mask),
        }
        return LossOutput(per_token=loss, metrics=metrics)


@register("loss", "dppo_tv")
class DPPOBinaryTV(_DPPO):
    """DPPO with a Binary-TV trust region: drop tokens whose probability moved too far.

    Paper: Qi et al., "Rethinking the Trust Region in LLM Reinforcement Learning" (arXiv:2602.04879);
    verl ``compute_policy_loss_dppo_tv``; the policy loss inside BPCO (QPHutu/golden_critic).

    Equation, with ``p = π(y_t)``, ``p_old = π_old(y_t)``, ``ρ = exp(clamp(log π − log π_old, ±20))``:
      ``valid = sg(A > 0 ? p − p_old ≤ delta_high : p − p_old ≥ −delta_low)``;
      ``ℓ = −A · sg(min(ρ, C)) · log π · valid`` (surrogate 'log_prob', verl 0.9.1), or
      ``ℓ = −A · ρ · valid`` (surrogate 'ratio'); both have gradient ``−A·ρ·∇log π·valid`` for ρ ≤ C.

    Differs from ppo_clip:
      * the trust region is on the probability difference (total variation of the binary
        event "this token"), not on the ratio, so rare tokens may move by large ratios;
      * a token outside the region is dropped (zero loss), not held at the clip value;
      * no dual clip: the detached ratio is truncated at C instead.

    Shapes: logprobs, old_logprobs, advantages, mask (N, T) → per_token (N, T).
    """

    Config = DPPOConfig
    paper = "Rethinking the Trust Region in LLM Reinforcement Learning (arXiv:2602.04879)"

    def _valid(self, prob: Tensor, old_prob: Tensor, inputs: LossInputs) -> Tensor:
        delta = prob - old_prob  # (N, T)
        cfg = self.config
        return torch.where(inputs.advantages > 0, delta <= cfg.delta_high, delta >= -cfg.delta_low)


@register("loss", "dppo_kl")
class DPPOBinaryKL(_DPPO):
    """DPPO with a Binary-KL trust region on the sampled token's probability.

    Paper: as dppo_tv (arXiv:2602.04879); verl ``compute_policy_loss_dppo_kl``.

    Equation: ``bkl = p_old·log(p_old/p) + (1 − p_old)·log((1 − p_old + eps)/(1 − p + eps))``;
      A > 0: ``valid = bkl ≤ delta_high ∨ p ≤ p_old``; A ≤ 0: ``valid = bkl ≤ delta_low ∨ p ≥ p_old``;
      the loss is dppo_tv's with this mask.

    Differs from dppo_tv:
      * the divergence is the KL between Bernoulli(p_old) and Bernoulli(p), which allows larger
        moves near 0.5 and smaller ones near 0 or 1;
      * moving against the advantage's direction is always valid.

    Shapes: logprobs, old_logprobs, advantages, mask (N, T) → per_token (N, T).
    """

    Config = DPPOKLConfig
    paper = "Rethinking the Trust Region in LLM Reinforcement Learning (arXiv:2602.04879)"

    def _valid(self, prob: Tensor, old_prob: Tensor, inputs: LossInputs) -> Tensor:
        cfg = self.config
        bkl = old_prob * (inputs.old_logprobs - inputs.logprobs) + (1.0 - old_prob) * torch.log(
            (1.0 - old_prob + cfg.eps) / (1.0 - prob + cfg.eps))  # (N, T)
        up = (bkl <= cfg.delta_high) | (prob <= old_prob)
        down = (bkl <= cfg.delta_low) | (prob >= old_prob)
        return torch.where(inputs.advantages > 0, up, down)
