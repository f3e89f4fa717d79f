"""The std dial: GRPO, Dr. GRPO and DAPO as one knob on the group reward std (docs/methods.md §2.30).

Paper: Bay & Yearick (arXiv:2607.00152), summarised in docs/methods.md §2.30 as "GRPO / Dr. GRPO / DAPO
as one dial — the group-standard-deviation identity" (abstract only; the identity below is DERIVED).

Binary rewards, k correct of G, ``p = k/G``, population std ``σ = sqrt(p(1 − p)) = sqrt(k(G − k))/G``.
With ``g_i = ∇ log π(o_i)`` (sequence level), ``ḡ⁺`` / ``ḡ⁻`` the means over correct / incorrect
completions and group-centred advantages ``A_i = (r_i − p)/s`` for some scale s:

    (1/G) Σ_i A_i g_i = (1/(G·s)) [k(1 − p) ḡ⁺ − (G − k) p ḡ⁻] = (σ²/s) (ḡ⁺ − ḡ⁻)

because ``k(1 − p)/G = (G − k)p/G = p(1 − p) = σ²``. So the coefficient on (ḡ⁺ − ḡ⁻) is
σ² for Dr. GRPO (s = 1), σ for GRPO with the population std (s = σ), ``σ²/σ_unb = σ·sqrt((G − 1)/G)``
with the unbiased std, and ``σ^(2−β)`` for the dial ``s = σ^β``. Unanimous groups (k = 0 or G)
have σ = 0 and contribute exactly 0 under every setting; DAPO's filter drops them, which changes
only how many groups share the batch normaliser (``batch_coefficients``).

The sequence-level identity is exact for an on-policy surrogate whose per-row weight is the
same for every token, e.g. ``seq-mean-token-sum`` aggregation (``Σ_t ∇ log π_t = ∇ log π(o)``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _check(k: int, group_size: int) -> None:
    if group_size < 1 or not 0 <= k <= group_size:
        raise ValueError(f"std_dial: need 0 <= k <= G and G >= 1, got k={k}, G={group_size}")


def binary_std(k: int, group_size: int, ddof: int = 0) -> float:
    """Std of a group of G binary rewards with k ones: ``sqrt(k(G − k)/(G(G − ddof)))``.

    ddof=0 is the population std ``sqrt(k(G−k))/G``; ddof=1 the unbiased one (verl, TRL). A group
    too small for ``ddof`` has std 0 (as ``rlvr.ops.group_stats``).
    """
    _check(k, group_size)
    if group_size <= ddof:
        return 0.0
    return math.sqrt(k * (group_size - k) / (group_size * (group_size - ddof)))


def dial_coefficient(k: int, group_size: int, *, std_power: float = 1.0, ddof: int = 0, eps: float = 0.0,
                     drop_zero_sigma: bool = False) -> float:
    """Coefficient c on (ḡ⁺ − ḡ⁻) of ``(1/G) Σ A_i g_i`` with ``A_i = (r_i − p)/(σ_ddof + eps)^β``.

    ``c = σ² / (σ_ddof + eps)^β`` with σ the population std; 0 for unanimous groups (their centred
    rewards are exactly 0, whatever the scale; ``drop_zero_sigma`` removes them, also giving 0).
    """
    _check(k, group_size)
    if k in (0, group_size):
        return 0.0
    sigma = binary_std(k, group_size, ddof=0)
    scale = (binary_std(k, group_size, ddof=ddof) + eps) ** std_power
    return sigma * sigma / scale


def grpo_coefficient(k: int, group_size: int, ddof: int = 0, eps: float = 0.0) -> float:
    """GRPO: σ with the population std (ddof=0), ``σ·sqrt((G − 1)/G)`` with the unbiased std (ddof=1)."""
    return dial_coefficient(k, group_size, std_power=1.0, ddof=ddof, eps=eps)


def dr_grpo_coefficient(k: int, group_size: int) -> float:
    """Dr. GRPO (no std scaling): σ² = p(1 − p)."""
    return dial_coefficient(k, group_size, std_power=0.0)


def dapo_coefficient(k: int, group_size: int, ddof: int = 1, eps: float = 0.0, std_power: float = 1.0) -> float:
    """DAPO: GRPO's coefficient (verl's unbiased std by default) with unanimous groups dropped (0)."""
    return dial_coefficient(k, group_size, std_power=std_power, ddof=ddof, eps=eps, drop_zero_sigma=True)


def coefficient_table(group_size: int, ks: list[int] | None = None) -> list[dict[str, float]]:
    """One row per k (default 0..G): σ, Dr. GRPO, GRPO (population / unbiased std) and DAPO coefficients."""
    rows = []
    for k in range(group_size + 1) if ks is None else ks:
        rows.append({"k": k, "sigma": binary_std(k, group_size),
                     "dr_grpo": dr_grpo_coefficient(k, group_size),
                     "grpo": grpo_coefficient(k, group_size, ddof=0),
                     "grpo_unbiased": grpo_coefficient(k, group_size, ddof=1),
                     "dapo": dapo_coefficient(k, group_size)})
    return rows


def batch_coefficients(ks: list[int], group_size: int, *, std_power: float = 1.0, ddof: int = 0,
                       eps: float = 0.0, drop_zero_sigma: bool = False) -> Tensor:
    """(B,) each group's coefficient in a batch gradient averaged over groups (seq-mean aggregation).

    Without the filter every group is divided by B; with ``drop_zero_sigma`` unanimous groups get 0
    and the others are divided by the number of split groups, so the split groups' coefficients are
    scaled up by B / B_kept: the filter changes the batch composition, not the per-group direction.
    """
    coef = torch.tensor([dial_coefficient(k, group_size, std_power=std_power, ddof=ddof, eps=eps)
                         for k in ks], dtype=torch.float64)  # (B,)
    split = torch.tensor([0 < k < group_size for k in ks])  # (B,)
    denom = int(split.sum()) if drop_zero_sigma else len(ks)
    return torch.where(split, coef, torch.zeros_like(coef)) / max(denom, 1)


def outcome_mean_gradients(per_sequence_grads: Tensor, rewards: Tensor) -> tuple[Tensor, Tensor]:
    """(ḡ⁺, ḡ⁻), each (P,): means of the rows of ``per_sequence_grads`` (G, P) with reward 1 / 0.

    ``rewards`` (G,) must be binary; a side with no completion gives a zero vector.
    """
    if per_sequence_grads.dim() != 2 or rewards.shape != per_sequence_grads.shape[:1]:
        raise ValueError(f"std_dial: grads {tuple(per_sequence_grads.shape)} must be (G, P) and rewards (G,), "
                         f"got rewards {tuple(rewards.shape)}")
    if not bool(((rewards == 0) | (rewards == 1)).all()):
        raise ValueError("std_dial: rewards must be binary (0 or 1)")
    correct = (rewards == 1).to(per_sequence_grads.dtype)  # (G,)
    wrong = 1.0 - correct
    g_plus = correct @ per_sequence_grads / correct.sum().clamp(min=1)  # (P,)
    g_minus = wrong @ per_sequence_grads / wrong.sum().clamp(min=1)  # (P,)
    return g_plus, g_minus


def group_policy_gradient(per_sequence_grads: Tensor, advantages: Tensor) -> Tensor:
    """(P,) the sequence-level policy gradient ``(1/G) Σ_i A_i g_i`` for grads (G, P), advantages (G,)."""
    return advantages.to(per_sequence_grads.dtype) @ per_sequence_grads / per_sequence_grads.shape[0]
