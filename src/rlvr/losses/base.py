"""The policy-loss protocol: ``LossInputs -> LossOutput`` with a per-token loss (N, T).

Aggregation to a scalar is a separate knob (``rlvr.aggregation``), applied by ``Objective``.
The helpers below are the pieces several surrogates share (the clamped log-ratio, masked
diagnostic fractions), so each loss file holds only its own equation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Mapping

from torch import Tensor

from rlvr.ops import masked_mean
from rlvr.plugin import Plugin
from rlvr.types import LossInputs, LossOutput


class PolicyLoss(Plugin, ABC):
    """A per-token surrogate; positions outside the mask may hold anything (aggregation drops them)."""

    # True for losses that read token_origin / behaviour_logprobs and correct off-policy tokens.
    handles_off_policy: ClassVar[bool] = False
    # False only for losses proven to give a row whose advantage is 0 on every trained token exactly
    # zero loss and zero gradient, whatever the other rows hold (each token's term is a finite factor
    # times A): the trainer may then leave such rows out of the update (optim.skip_zero_rows).
    needs_every_row: ClassVar[bool] = True
    # True for losses that clip the ratio pi/pi_old: with optim.old_logprobs = rollout the clip bounds
    # the step from the policy that sampled the row, which makes lagged rows safe (rlvr.train.async_check).
    ratio_clipped: ClassVar[bool] = False

    @classmethod
    def corrects_staleness(cls, params: Mapping[str, Any]) -> bool:
        """Whether the loss, with hyperparameters ``params`` (a config's, not yet built), weights rows
        sampled by an older policy back to the current one by itself (asynchronous generation with
        ``max_staleness`` >= 1 needs this or a ratio-clipped loss against the rollout log-probs)."""
        return False

    @abstractmethod
    def __call__(self, inputs: LossInputs) -> LossOutput:
        """Apply the plug-in (each registered class implements it)."""


def log_ratio(inputs: LossInputs, bound: float | None) -> Tensor:
    """(N, T) ``log π − log π_old``, clamped to ±``bound`` (verl: 20) so ``exp`` cannot overflow.

    The behaviour log-probs are detached: the gradient flows through the current policy only.
    """
    diff = inputs.logprobs - inputs.old_logprobs.detach()
    return diff if bound is None else diff.clamp(-bound, bound)


def approx_kl(log_ratio_: Tensor, mask: Tensor) -> Tensor:
    """Detached scalar ``mean_t (log π_old − log π)`` over trained tokens (verl's ``ppo_kl``)."""
    return masked_mean(-log_ratio_.detach(), mask)


def masked_fraction(condition: Tensor, mask: Tensor) -> Tensor:
    """Detached scalar: the fraction of trained tokens where ``condition`` (N, T) holds."""
    return masked_mean(condition.detach().float(), mask)
