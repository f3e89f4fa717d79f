"""Uniform selection: fresh problems from the task's training stream every step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlvr.registry import register
from rlvr.selection.base import Selector
from rlvr.types import Problem


@dataclass(frozen=True)
class UniformConfig:
    """No hyperparameters: the task's own sampler decides the distribution."""


@register("selector", "uniform")
class Uniform(Selector):
    """Draw ``n`` problems from the task's training distribution, seeded per step.

    Paper: none (the default of every RLVR trainer).
    Equation: problems_t ~ task.train(seed_t), seed_t a function of (run seed, step).
    Differs from curriculum selectors: keeps no state; ``observe`` does nothing.
    Shapes: → list of n problems.
    """

    Config = UniformConfig

    def select(self, task: Any, n: int, step: int, seed: int) -> list[Problem]:
        return task.problems(n, seed=seed)
