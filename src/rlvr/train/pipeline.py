"""The run's plug-ins as one typed, frozen record: ``Pipeline`` (``rlvr.train.build.build_pipeline``).

The gradient trainer builds every field from the config once (``validate_run`` builds it before any
work and hands it on); a loop of its own reads the task and the selector only, and leaves the rest
empty. The fields cannot be reassigned; a stateful plug-in (a curriculum selector, FADE's entropy
target) still changes inside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pipeline:
    task: Any  # rlvr.tasks.Task: problems and their verifier
    selector: Any  # kind selector: which problems a step trains on
    reward_functions: list = field(default_factory=list)  # algorithm.rewards, one objective each
    teacher: Any = None  # a first-mistake teacher, when the advantage reads first mistakes
    sampler: Any = None  # kind sampler: rollout.sampler
    advantage: Any = None  # kind advantage: the estimator
    objective: Any = None  # rlvr.losses.objective.Objective: the policy loss, its aggregation, KL, entropy
    shapers: list = field(default_factory=list)  # kind shaper, in order
    filters: list = field(default_factory=list)  # kind filter, in order
    weightings: list = field(default_factory=list)  # kind weighting, in order

    STATEFUL_LISTS = ("shapers", "filters", "weightings")  # the fields holding several plug-ins
