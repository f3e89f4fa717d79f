"""The advantage-estimator protocol: ``AdvantageInputs -> AdvantageOutput`` with advantages (N, T)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch
from torch import Tensor

from rlvr.plugin import Plugin
from rlvr.types import AdvantageInputs


@dataclass
class AdvantageOutput:
    advantages: Tensor  # (N, T), 0 on untrained tokens
    returns: Tensor | None = None  # (N, T) value targets, for estimators that have them (GAE)
    metrics: dict[str, Tensor] = field(default_factory=dict)  # detached scalars, logged under adv/


class AdvantageEstimator(Plugin, ABC):
    """Maps rewards (and optionally values) to per-token advantages.

    Batch-level statistics (a saturation, a mean entropy, a mean variance) must describe the *global*
    batch under data parallelism, while each rank holds only its rows. An estimator that needs them
    returns their additive sufficient statistics (sums and counts) from ``batch_stats``; the trainer
    sums them over ranks into ``AdvantageInputs.global_stats``, and ``__call__`` reads them through
    ``stats`` (which falls back to this batch's own sums in one process). No distributed calls here.
    ``needs_entropy``: the trainer passes the policy's token entropies (``AdvantageInputs.entropy``).
    """

    needs_entropy = False
    # Fewest reward objectives (columns of AdvantageInputs.rewards) the method means anything with:
    # a multi-objective reweighting with one objective is another estimator (see mechanism_inputs).
    min_objectives = 1

    @abstractmethod
    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        """Apply the plug-in (each registered class implements it)."""

    def batch_stats(self, inputs: AdvantageInputs) -> dict[str, Tensor]:
        """Additive statistics of this batch (0-d or fixed-shape float64 tensors) that ``__call__``
        needs over the global batch; the same keys and shapes on every rank. Default: none."""
        return {}

    def stats(self, inputs: AdvantageInputs) -> dict[str, Tensor]:
        """The global batch's statistics: ``inputs.global_stats`` when the trainer reduced them, else this
        batch's ``batch_stats``."""
        return inputs.global_stats if inputs.global_stats is not None else self.batch_stats(inputs)


def sequence_scores(inputs: AdvantageInputs) -> Tensor:
    """(N,) outcome score per row: Σ_t token_rewards on trained tokens when dense rewards are given
    (verl's convention), else the weighted sum of the reward objectives."""
    if inputs.token_rewards is not None:
        return (inputs.token_rewards * inputs.mask).sum(-1).float()
    return inputs.scalar_rewards()


def outcome_token_rewards(inputs: AdvantageInputs) -> Tensor:
    """(N, T) dense rewards: ``token_rewards`` when given, else the row's outcome score placed on its
    last trained token (verl's convention), 0 elsewhere. A row with no trained token gets none."""
    if inputs.token_rewards is not None:
        return inputs.token_rewards.float()
    mask = inputs.mask
    scores = inputs.scalar_rewards()  # (N,)
    t = mask.shape[1]
    positions = torch.arange(t, device=mask.device).expand_as(mask)  # (N, T)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).max(dim=1).values  # (N,)
    out = torch.zeros(mask.shape, dtype=scores.dtype, device=mask.device)
    rows = (last >= 0).nonzero(as_tuple=True)[0]
    out[rows, last[rows]] = scores[rows]
    return out
