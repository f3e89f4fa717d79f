"""RIPO: a Fisher–Rao (arcsine-angle) trust region on the sampled token's probability."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.losses.base import PolicyLoss, approx_kl, log_ratio, masked_fraction
from rlvr.ops import masked_mean
from rlvr.registry import param, register
from rlvr.types import LossInputs, LossOutput

MODES = ("masked", "clip")
SIDES = ("both", "advantage")


@dataclass(frozen=True)
class RIPOConfig:
    fr_delta: float = param(0.2, "Fisher-Rao radius delta: valid iff 2|asin sqrt(p) - asin sqrt(p_old)| <= delta "
                                 "(0.2 ~ PPO's +-0.2 at p_old = 0.5; RECONSTRUCTION default)")
    ripo_mode: str = param("masked", "'masked': -A*ratio*sg(valid) (DPPO-style); 'clip': PPO max/clip with the "
                                     "probability-dependent ratio bounds (RECONSTRUCTION; masked is the default)")
    mask_sides: str = param("both", "masked mode: 'both' = drop tokens outside the region either way (docs/methods.md §2.25 "
                                    "'valid iff d_FR <= delta'); 'advantage' = only bound the move A favours (DPPO)")
    log_ratio_clamp: float = param(20.0, "clamp log pi - log pi_old to +-this before exp (verl: 20)")

    def __post_init__(self) -> None:
        if self.fr_delta <= 0:
            raise ValueError(f"ripo: fr_delta must be > 0, got {self.fr_delta}")
        if self.ripo_mode not in MODES:
            raise ValueError(f"ripo: ripo_mode must be one of {MODES}, got '{self.ripo_mode}'")
        if self.mask_sides not in SIDES:
            raise ValueError(f"ripo: mask_sides must be one of {SIDES}, got '{self.mask_sides}'")
        if self.log_ratio_clamp <= 0:
            raise ValueError(f"ripo: log_ratio_clamp must be > 0, got {self.log_ratio_clamp}")


def fr_angle(logprobs: Tensor) -> Tensor:
    """(…) ``arcsin √p`` in [0, π/2]: half the Fisher–Rao coordinate of the event "this token"."""
    return torch.arcsin(logprobs.exp().clamp(0.0, 1.0).sqrt())


def ratio_bounds(old_logprobs: Tensor, delta: float) -> tuple[Tensor, Tensor]:
    """(lo, hi), each shaped like ``old_logprobs``: the ratios ``p/p_old`` with ``d_FR ≤ delta``.

    ``lo = sin²(θ₀ − δ/2)/p_old``, ``hi = sin²(θ₀ + δ/2)/p_old`` with angles clamped to [0, π/2];
    computed in log space so that a tiny p_old gives ``lo = 0`` instead of 0/0.
    """
    theta0 = fr_angle(old_logprobs)
    low = (theta0 - delta / 2).clamp(0.0, math.pi / 2)
    high = (theta0 + delta / 2).clamp(0.0, math.pi / 2)
    lo = torch.exp(2.0 * torch.log(torch.sin(low)) - old_logprobs)  # sin(0) = 0 → log = −inf → lo = 0
    hi = torch.exp(2.0 * torch.log(torch.sin(high)) - old_logprobs)
    return lo, hi


@register("loss", "ripo")
class RIPO(PolicyLoss):
    """Riemannian Isometric Policy Optimization: a Fisher–Rao trust region instead of PPO's ratio box.

    Paper: "RIPO — Riemannian Isometric Policy Optimization" (seed abstract, arXiv id unknown);
    docs/methods.md §2.25. RECONSTRUCTION from the abstract, which has no formulas: reconstructed are the
    distance (Fisher–Rao of the binary event {token, not token}), the radius ``fr_delta = 0.2``,
    the loss form ``ripo_mode`` (masked surrogate or clip) and ``mask_sides``.

    Equation, with ``p = π(y_t)``, ``p₀ = π_old(y_t)``, ``θ = arcsin√p``, ``θ₀ = arcsin√p₀``,
    ``ρ = exp(clamp(log π − log π_old, ±20))``:
      ``d_FR(p, p₀) = 2|θ − θ₀|``, ``valid = sg(d_FR ≤ δ)`` (mask_sides 'both'), or only the move
      A favours bounded (mask_sides 'advantage': A > 0 → ``θ − θ₀ ≤ δ/2``, else ``θ₀ − θ ≤ δ/2``);
      'masked': ``ℓ = −A·ρ·valid``;
      'clip':   ``ℓ = max(−A·ρ, −A·clip(ρ, lo, hi))``, ``lo, hi = sin²(θ₀ ∓ δ/2)/p₀``
                (angles clamped to [0, π/2]).
    The ratio range shrinks as p₀ grows (δ = 0.1: [0, 6.65] at p₀ = 0.001, [0.90, 1.10] at 0.5,
    [0.96, 1.03] at 0.9); at p₀ = 0.5 it is ``1 ± sin δ``.

    Differs from ppo_clip:
      * the trust region is a fixed Fisher–Rao distance, so the allowed ratio range depends on
        p₀: wide for rare tokens (PPO's box is too conservative there), narrow for likely ones
        (PPO's box is too aggressive there; for p₀ > 1/(1 + eps) its upper clip never binds);
      * 'masked' drops a token outside the region (zero loss and gradient) instead of holding it
        at the clip value, and by default also in the direction A disfavours;
      * no dual clip; a δ ≥ π makes every ratio valid, giving the unclipped surrogate ``−A·ρ``.

    Metrics: ``clipfrac`` (trained tokens outside the region, or clipped in 'clip' mode),
    ``approx_kl``, ``fr_dist_mean`` (mean Fisher–Rao distance over trained tokens).

    Shapes: logprobs, old_logprobs, advantages, mask (N, T) → per_token (N, T).
    """

    Config = RIPOConfig
    needs_every_row = False  # every mode is −A times a finite factor: zero where A = 0
    paper = "RIPO: Riemannian Isometric Policy Optimization (arXiv id unknown; seed abstract)"

    def __call__(self, inputs: LossInputs) -> LossOutput:
        cfg, mask, adv = self.config, inputs.mask, inputs.advantages
        lr = log_ratio(inputs, cfg.log_ratio_clamp)  # (N, T)
        ratio = lr.exp()
        with torch.no_grad():
            shift = fr_angle(inputs.logprobs) - fr_angle(inputs.old_logprobs)  # (N, T) θ − θ₀
        if cfg.ripo_mode == "clip":
            lo, hi = ratio_bounds(inputs.old_logprobs.detach(), cfg.fr_delta)  # (N, T) each
            unclipped = -adv * ratio
            clipped = -adv * torch.minimum(torch.maximum(ratio, lo), hi)
            loss = torch.maximum(unclipped, clipped)
            outside = clipped > unclipped
        else:
            half = cfg.fr_delta / 2
            if cfg.mask_sides == "both":
                valid = shift.abs() <= half
            else:
                valid = torch.where(adv > 0, shift <= half, -shift <= half)
            loss = -adv * ratio * valid
            outside = ~valid
        metrics = {
            "clipfrac": masked_fraction(outside, mask),
            "approx_kl": approx_kl(lr, mask),
            "fr_dist_mean": masked_mean(2.0 * shift.abs(), mask),
        }
        return LossOutput(per_token=loss, metrics=metrics)

