"""TACO: tail-aware down-weighting of positive advantages on implausible tokens."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.ops import masked_mean
from rlvr.registry import param, register
from rlvr.types import BatchError
from rlvr.weighting.base import TokenWeighting, WeightingInputs, WeightingOutput


@dataclass(frozen=True)
class TACOConfig:
    alpha: float = param(0.01, "tail threshold α > 0: a token is risky when p < α·exp(−H), i.e. its "
                               "surprisal exceeds the entropy by more than ln(1/α) (TACO code: 0.01)")
    lam: float = param(0.9, "strength λ in [0, 1]: a risky token's positive advantage is scaled by "
                            "1 − λ(1 − exp(−r_tail)) ∈ (1 − λ, 1]; 0 = off (TACO code: 0.9)")

    def __post_init__(self) -> None:
        if not self.alpha > 0.0:
            raise ValueError(f"taco: alpha must be > 0, got {self.alpha}")
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"taco: lam must be in [0, 1], got {self.lam}")


@register("weighting", "taco")
class TACO(TokenWeighting):
    """Tail-aware credit calibration: shrink positive advantages of low-probability, low-entropy tokens.

    Paper: "When Implausible Tokens Get Reinforced: Tail-Aware Credit Calibration for LLM
    Reinforcement Learning" (arXiv id not known to us); exact from the authors' code,
    xiuyilou/TACO @7a2f458 ``compute_taco_token_advantages`` (docs/methods.md §2.26).

    Equation, with p the current policy's probability of the sampled token and H its entropy
    (both detached):
      ``r_tail = −log p − H + ln α``  (0 on untrained tokens);
      ``w = 1`` if ``r_tail ≤ 0`` else ``w = 1 − λ(1 − exp(−r_tail))``, so ``w ∈ (1 − λ, 1]``;
      ``A′ = w·A`` on trained tokens with ``A > 0``; ``A′ = A`` elsewhere.

    Differs from the plain broadcast advantage (GRPO et al.):
      * positive credit on a "tail" token (p < α·e^{−H}) is softly reduced, never to zero (λ < 1);
      * high-entropy rare tokens (exploration) keep full credit, because H raises the threshold;
      * negative advantages and untrained tokens are never changed; ``lam = 0`` is the identity.

    Metrics: ``taco_weight_mean`` (mean w over trained tokens, all signs), ``taco_tail_risk_mean``,
    ``taco_tail_token_frac`` (trained tokens with r_tail > 0), ``taco_positive_adv_frac``,
    ``taco_reweighted_frac`` (trained tokens with A > 0 and r_tail > 0: the ones actually changed).

    Shapes: advantages, mask, logprobs, entropy (N, T) → advantages (N, T).
    """

    Config = TACOConfig
    needs_every_row = False  # row-local; scales positive advantages only
    paper = ("When Implausible Tokens Get Reinforced: Tail-Aware Credit Calibration for LLM "
             "Reinforcement Learning (arXiv id unknown; code github.com/xiuyilou/TACO)")

    def __call__(self, inputs: WeightingInputs) -> WeightingOutput:
        if inputs.logprobs is None or inputs.entropy is None:
            raise BatchError("taco needs the current policy's logprobs and entropy (N, T); got "
                             f"logprobs={'None' if inputs.logprobs is None else 'set'}, "
                             f"entropy={'None' if inputs.entropy is None else 'set'}")
        cfg, mask, adv = self.config, inputs.mask, inputs.advantages
        with torch.no_grad():
            risk = tail_risk(inputs.logprobs, inputs.entropy, mask, cfg.alpha)  # (N, T)
            weights = tail_weights(risk, cfg.lam).to(adv.dtype)  # (N, T), 1 where risk ≤ 0
            positive = (adv > 0) & mask  # (N, T)
            out = torch.where(positive, weights * adv, adv)
            tail = (risk > 0) & mask
            metrics = {
                "taco_weight_mean": masked_mean(weights, mask),
                "taco_tail_risk_mean": masked_mean(risk, mask),
                "taco_tail_token_frac": masked_mean(tail.float(), mask),
                "taco_positive_adv_frac": masked_mean(positive.float(), mask),
                "taco_reweighted_frac": masked_mean((tail & positive).float(), mask),
            }
        return WeightingOutput(out, metrics=metrics)


def tail_risk(logprobs: Tensor, entropy: Tensor, mask: Tensor, alpha: float) -> Tensor:
    """(N, T) ``−log p − H + ln α`` on trained tokens, 0 elsewhere (so padding is never risky)."""
    risk = -logprobs - entropy + math.log(alpha)
    return torch.where(mask, risk, torch.zeros_like(risk))


def tail_weights(risk: Tensor, lam: float) -> Tensor:
    """(N, T) ``1 − λ(1 − e^{−r})`` where ``r > 0``, else 1."""
    shrunk = 1.0 - lam * (1.0 - torch.exp(-risk.clamp(min=0.0)))  # clamp: no overflow where r ≪ 0
    return torch.where(risk > 0, shrunk, torch.ones_like(risk))
