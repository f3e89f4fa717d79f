"""The advantage-estimator protocol: ``AdvantageInputs -> AdvantageOutput`` with advantages (N, T)."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from abc import ABC, abstractmethod

from rlvr.plugin import Plugin
from rlvr.types import AdvantageInputs


@dataclass
class AdvantageOutput:
    advantages: Tensor  # (N, T), 0 on untrained tokens
    returns: Tensor | None = None  # (N, T) value targets, for estimators that have them (GAE)
    metrics: dict[str, Tensor] = field(default_factory=dict)  # detached scalars, logged under adv/


class AdvantageEstimator(Plugin, ABC):
    """Maps rewards (and optionally values) to per-token advantages."""

    @abstractmethod
    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        """Apply the plug-in (each registered class implements it)."""


def sequence_scores(inputs: AdvantageInputs) -> Tensor:
    """(N,) outcome score per row: Σ_t token_rewards on trained tokens when dense rewards are given
    (verl's convention), else the weighted sum of the reward objectives."""
    if inputs.token_rewards is not None:
        return (inputs.token_rewards * inputs.mask).sum(-1).float()
    return inputs.scalar_rewards()
