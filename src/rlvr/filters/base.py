"""The batch-filter protocol: ``Rollouts -> Rollouts`` keeping or dropping whole groups, never single rows."""

from __future__ import annotations

from abc import ABC, abstractmethod

from rlvr.plugin import Plugin
from rlvr.types import Rollouts


class BatchFilter(Plugin, ABC):
    @abstractmethod
    def __call__(self, rollouts: Rollouts) -> Rollouts:
        """Apply the plug-in (each registered class implements it)."""
