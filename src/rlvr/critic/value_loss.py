"""Value targets and the clipped value loss (docs/methods.md §1.6); pure tensor math."""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.advantages.base import outcome_token_rewards
from rlvr.advantages.gae import gae_recursion
from rlvr.aggregation import aggregate
from rlvr.ops import masked_mean, masked_var
from rlvr.types import AdvantageInputs


def mc_returns(inputs: AdvantageInputs, gamma: float = 1.0) -> Tensor:
    """(N, T) Monte-Carlo value targets: the discounted reward-to-go (GAE with λ = 1 and V ≡ 0).
    With an outcome-only reward and γ = 1 this is the outcome on every trained token."""
    rewards = outcome_token_rewards(inputs)  # (N, T)
    return gae_recursion(rewards, torch.zeros_like(rewards), inputs.mask, gamma, 1.0)


def clipped_value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, *, clip: float,
                       mode: str = "token-mean", num_tokens: Tensor | float | None = None,
                       num_seqs: Tensor | float | None = None, horizon: float | None = None,
                       dp_size: int = 1) -> tuple[Tensor, Tensor]:
    """``0.5 · agg(max((v − R)², (clip(v, v_old ± c) − R)²))`` and the clipped fraction.

    values (N, T) carry the gradient; old_values, returns (N, T) are the predictions before the
    update and the targets; mask (N, T) bool. ``clip ≤ 0`` turns clipping off.
    """
    unclipped = (values - returns) ** 2  # (N, T)
    if clip > 0:
        near = old_values + (values - old_values).clamp(-clip, clip)
        clipped = (near - returns) ** 2
        per_token = torch.maximum(unclipped, clipped)
        frac = masked_mean((clipped > unclipped).float(), mask)
    else:
        per_token, frac = unclipped, torch.zeros((), device=values.device)
    loss = 0.5 * aggregate(per_token, mask, mode, num_tokens=num_tokens, num_seqs=num_seqs, horizon=horizon,
                           dp_size=dp_size)
    return loss, frac.detach()


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor, ddof: int = 1, eps: float = 1e-8) -> Tensor:
    """``1 − Var(R − V)/(Var(R) + eps)`` over trained tokens: 1 for a perfect critic, 0 for a
    constant one at the mean, negative when worse than that."""
    return 1.0 - masked_var(returns - values, mask, ddof) / (masked_var(returns, mask, ddof) + eps)
