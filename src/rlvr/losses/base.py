"""The policy-loss protocol: ``LossInputs -> LossOutput`` with a per-token loss (N, T).

Aggregation to a scalar is a separate knob (``rlvr.aggregation``), applied by ``Objective``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from rlvr.plugin import Plugin
from rlvr.types import LossInputs, LossOutput


class PolicyLoss(Plugin, ABC):
    """A per-token surrogate; positions outside the mask may hold anything (aggregation drops them)."""

    @abstractmethod
    def __call__(self, inputs: LossInputs) -> LossOutput:
        """Apply the plug-in (each registered class implements it)."""
