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
        """Learn from the step's results; stateless selectors ignore it.

        Keys: ``problems`` (N,) and ``rewards`` (N, K) of the trained batch; ``meta`` (the batch's
        meta, e.g. shapers' per-group notes); ``metrics`` (the step's metric dict: read the update
        size from it — ``loss/approx_kl``, ``optim/grad_norm`` — and add ``select/...`` diagnostics).
        """
