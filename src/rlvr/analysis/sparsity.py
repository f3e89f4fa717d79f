"""Functional-sparsity probe (docs/methods.md §2.5, RECONSTRUCTION): how much of an update's reward gain
the largest-magnitude fraction q of its entries carries.

    Δ = θ − θ_0,   θ_q = θ_0 + Δ ⊙ 1[|Δ| ≥ t_q],   t_q = the ⌈q·n⌉-th largest |Δ|

over all n entries (``scope="global"``) or per tensor (``scope="tensor"``). Kept entries are copied
from θ, dropped ones from θ_0, so q = 1 gives θ and q = 0 gives θ_0 bit for bit. Ties at t_q are
all kept.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

SCOPES = ("global", "tensor")


def _threshold(magnitudes: Tensor, q: float) -> float:
    """The ⌈q·n⌉-th largest value of a flat tensor; +inf when nothing is kept."""
    k = math.ceil(q * magnitudes.numel() - 1e-9)
    if k <= 0:
        return math.inf
    return float(torch.topk(magnitudes, k, sorted=True).values[-1])


def sparsify_update(theta0: dict[str, Tensor], theta: dict[str, Tensor], q: float,
                    scope: str = "global") -> dict[str, Tensor]:
    """θ_q: θ on the top-q fraction of |θ − θ_0| entries, θ_0 elsewhere (same keys as ``theta``)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"sparsify_update: q must be in [0, 1], got {q}")
    if scope not in SCOPES:
        raise ValueError(f"sparsify_update: scope must be one of {SCOPES}, got '{scope}'")
    if set(theta0) != set(theta):
        raise ValueError("sparsify_update: theta0 and theta have different keys")
    delta = {k: (theta[k].double() - theta0[k].double()).abs() for k in theta}
    if scope == "global":
        flat = torch.cat([d.flatten() for d in delta.values()]) if delta else torch.zeros(0)
        t = _threshold(flat, q)
        cut = {k: t for k in delta}
    else:
        cut = {k: _threshold(d.flatten(), q) for k, d in delta.items()}
    return {k: torch.where(delta[k] >= cut[k], theta[k], theta0[k]) for k in theta}


def kept_fraction(theta0: dict[str, Tensor], theta_q: dict[str, Tensor], theta: dict[str, Tensor]) -> float:
    """Fraction of the entries that θ changed which θ_q also changes."""
    moved = sum(int((theta[k] != theta0[k]).sum()) for k in theta)
    kept = sum(int(((theta_q[k] != theta0[k]) & (theta[k] != theta0[k])).sum()) for k in theta)
    return kept / moved if moved else 1.0


@torch.no_grad()
def sparsity_probe(model: torch.nn.Module, theta0: dict[str, Tensor], theta: dict[str, Tensor],
                   qs: list[float], reward_fn: Callable[[torch.nn.Module], float],
                   scope: str = "global") -> list[dict[str, float]]:
    """For each q: load θ_q into ``model`` (keys of ``theta``, e.g. its named parameters), score it with
    ``reward_fn`` and report the reward retained ``(R(θ_q) − R(θ_0)) / (R(θ) − R(θ_0))`` (nan when θ
    gained nothing). The model holds θ again afterwards."""
    state = dict(model.named_parameters())

    def score(weights: dict[str, Tensor]) -> float:
        for k, v in weights.items():
            state[k].copy_(v)
        return float(reward_fn(model))

    r0, r1 = score(theta0), score(theta)
    rows = []
    for q in qs:
        theta_q = sparsify_update(theta0, theta, q, scope)
        r = score(theta_q)
        gain = r1 - r0
        rows.append({"q": q, "kept_frac": kept_fraction(theta0, theta_q, theta), "reward": r,
                     "reward_base": r0, "reward_full": r1, "retained": (r - r0) / gain if gain else math.nan})
    score(theta)
    return rows
