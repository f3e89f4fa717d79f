"""Length bias of a loss aggregation: how much gradient weight each trajectory gets (docs/methods.md §2.18).

Paper: Ding et al., length-weighting impossibility (viXra:2605.0117, abstract only): under an outcome
reward no per-token length weighting ``f(L)`` is both (P1) an unbiased policy-gradient estimator and
(P2) length-invariant. The family ``f_α(L) = L^(α−1)`` trades one for the other: a trajectory of L
trained tokens gets per-token weight ``L^(α−1)/C`` and total weight ``L·f_α(L)/C = L^α/C``.

* α = 0: every trajectory weighs the same (GRPO, ``seq-mean-token-mean``): P2, not P1.
* α = 1: weight ∝ length (Dr. GRPO, ``seq-mean-token-sum(-norm)``; ``token-mean`` too, up to the
  batch's token count): ``Σ_t ∇ log π_t = ∇ log π(o)``, so P1, and longer trajectories dominate.

The aggregation itself is ``rlvr.aggregation`` (mode ``length-power``); this module only reports.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.aggregation import AGGREGATION_MODES, token_weights

# The length exponent each fixed mode implies (length-power carries its own α).
MODE_ALPHA = {"seq-mean-token-mean": 0.0, "seq-mean-token-sum": 1.0, "seq-mean-token-sum-norm": 1.0,
              "token-mean": 1.0}


def _lengths(lengths: Tensor) -> Tensor:
    if lengths.dim() != 1 or lengths.numel() == 0:
        raise ValueError(f"length_bias: lengths must be a non-empty (N,) tensor, got {tuple(lengths.shape)}")
    if bool((lengths < 1).any()):
        raise ValueError("length_bias: every trajectory needs at least one trained token")
    return lengths.to(torch.float64)


def per_token_weight(lengths: Tensor, alpha: float, norm: float = 1.0) -> Tensor:
    """(N,) ``f_α(L)/C = L^(α−1)/C``: the weight of each trained token of a trajectory of length L."""
    return _lengths(lengths) ** (alpha - 1.0) / norm


def trajectory_weight(lengths: Tensor, alpha: float, norm: float = 1.0) -> Tensor:
    """(N,) ``L·f_α(L)/C = L^α/C``: a trajectory's total weight (its share of the gradient, up to 1/N)."""
    return _lengths(lengths) ** alpha / norm


def lengths_to_mask(lengths: Tensor, horizon: int | None = None) -> Tensor:
    """(N, T) bool mask with the first ``L_i`` positions of row i trained; T = max L unless given."""
    n_tokens = _lengths(lengths).long()
    t = int(n_tokens.max()) if horizon is None else horizon
    if t < int(n_tokens.max()):
        raise ValueError(f"length_bias: horizon {t} is shorter than the longest trajectory")
    return torch.arange(t).unsqueeze(0) < n_tokens.unsqueeze(1)  # (N, T)


@dataclass
class LengthBiasReport:
    """Per-trajectory gradient weights against length (all tensors (N,), float64)."""

    lengths: Tensor  # (N,) trained tokens per trajectory
    token_weight: Tensor  # (N,) weight of each of its tokens
    trajectory_weight: Tensor  # (N,) L · token_weight
    share: Tensor  # (N,) trajectory_weight / Σ trajectory_weight
    alpha: float  # length exponent: trajectory_weight ∝ L^alpha (least-squares slope in log-log)

    @property
    def dominance(self) -> float:
        """Largest over smallest share: 1 = no length bias; L_max/L_min at α = 1."""
        return float(self.share.max() / self.share.min())

    def rows(self) -> list[dict[str, float]]:
        """One dict per trajectory, sorted by length, for printing or a table."""
        order = torch.argsort(self.lengths, stable=True)
        return [{"length": float(self.lengths[i]), "token_weight": float(self.token_weight[i]),
                 "trajectory_weight": float(self.trajectory_weight[i]), "share": float(self.share[i])}
                for i in order.tolist()]


def length_bias_report(lengths: Tensor, *, alpha: float | None = None, mode: str | None = None,
                       norm: float | None = None, horizon: int | None = None) -> LengthBiasReport:
    """Weights vs length for the family at ``alpha`` or for an aggregation ``mode``.

    With ``alpha`` alone: ``L^(α−1)/norm`` per token (norm default 1, as docs/methods.md §2.18 test 1). With
    ``mode``: the weights ``rlvr.aggregation.token_weights`` gives a batch of these lengths (padded
    to ``horizon``, default max L), so normalisers (1/N, C, the token count) are included exactly.
    """
    if (alpha is None) == (mode not in MODE_ALPHA):  # alpha iff no mode or length-power
        raise ValueError("length_bias_report: give alpha, or a mode; mode 'length-power' needs alpha too")
    lens = _lengths(lengths)  # (N,)
    if mode is None:
        tok = per_token_weight(lens, alpha, 1.0 if norm is None else norm)
    else:
        if mode not in AGGREGATION_MODES:
            raise ValueError(f"length_bias_report: unknown mode '{mode}'; valid: {', '.join(AGGREGATION_MODES)}")
        mask = lengths_to_mask(lens, horizon)
        w = token_weights(mask, mode, norm=norm, alpha=0.0 if alpha is None else alpha).to(torch.float64)
        tok = w.sum(-1) / lens  # (N,) every trained token of a row has the same weight
    traj = tok * lens
    return LengthBiasReport(lens, tok, traj, traj / traj.sum(), _slope(lens, traj))


def _slope(lengths: Tensor, weights: Tensor) -> float:
    """Least-squares slope of log weight on log length; NaN when all lengths are equal."""
    x, y = lengths.log(), weights.log()
    xc = x - x.mean()
    denom = (xc * xc).sum()
    return float((xc * (y - y.mean())).sum() / denom) if float(denom) > 0 else float("nan")
