"""The selector protocol: which problems a step trains on, and what it learns from the results."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from rlvr.plugin import Plugin
from rlvr.types import Problem


class Selector(Plugin, ABC):
    @abstractmethod
    def select(self, task: Any, n: int, step: int, seed: int) -> list[Problem]:
        """``n`` problems for ``step``; the same (step, seed) gives the same problems (exact resume)."""

    def observe(self, feedback: dict[str, Any]) -> None:
        """Learn from the step's results (rewards per problem); stateless selectors ignore it."""
