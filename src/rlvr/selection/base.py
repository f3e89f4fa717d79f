"""The selector protocol: which problems a step trains on, and what it learns from the results."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from torch import Tensor

from rlvr.plugin import Plugin
from rlvr.types import Problem


class Selector(Plugin, ABC):
    """Under data parallelism every rank holds one selector; ``select`` is called with the same
    arguments on every rank (each rank then trains its share), and ``observe`` / ``row_weights``
    receive the *global* batch (every rank's rows, in rank order), so the state stays identical on
    every rank and is checkpointed once.

    ``feedback_meta``: keys of ``Rollouts.meta`` (lists, one entry per group) that ``observe`` reads;
    the trainer concatenates them over ranks. ``update_measure``: how far the update moved the
    policy, measured by the trainer for ``observe`` (``policy_kl`` | ``param_delta_sq``; see
    ``rlvr.train.movement``) or None.
    """

    feedback_meta: tuple[str, ...] = ()
    update_measure: str | None = None

    @abstractmethod
    def select(self, task: Any, n: int, step: int, seed: int) -> list[Problem]:
        """``n`` problems for ``step``; the same (step, seed) gives the same problems (exact resume)."""

    def observe(self, feedback: dict[str, Any]) -> None:
        """Learn from the step's results; stateless selectors ignore it.

        Keys: ``problems`` (N,) and ``rewards`` (N, K) of the trained batch; ``meta`` (the batch's
        meta, e.g. shapers' per-group notes); ``metrics`` (the step's metric dict: read the update
        size from it — ``optim/policy_kl``, ``optim/param_delta_sq`` — and add ``select/...`` diagnostics).
        """

    def row_weights(self, feedback: dict[str, Any]) -> Tensor | None:
        """(N,) loss weights of the step's rows (``problems``, ``rewards`` of the global batch, before
        ``observe``), multiplied into their advantages; None (the default) = no weighting."""
        return None
