"""The reward-shaper protocol: ``Rollouts -> Rollouts`` with rewards (N, K) or token_rewards (N, T) changed."""

from __future__ import annotations

from abc import ABC, abstractmethod

from rlvr.plugin import Plugin
from rlvr.types import Rollouts


class RewardShaper(Plugin, ABC):
    @abstractmethod
    def __call__(self, rollouts: Rollouts) -> Rollouts:
        """Return the batch with shaped rewards (a reward field never receives an advantage)."""
