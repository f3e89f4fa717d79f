"""A sampler plug-in whose completions depend only on the problem, not on the rank: named by dotted path
(``rollout.sampler.name=tests.e2e.rank_free:RankFreeSampler``) so a run launched from the command line
draws the same global batch on any number of processes. Tests only."""

from __future__ import annotations

from typing import Any

import torch

from rlvr.rollout.samplers.base import SampleContext
from rlvr.rollout.samplers.plain import PlainSampler
from rlvr.types import Problem, Rollouts
from tests.e2e.global_worker import PerProblemSampler


class RankFreeSampler(PlainSampler):
    """The plain sampler, each problem's group seeded by the problem (global_worker.PerProblemSampler).

    Differs from plain: the seed ignores the rank and step, and rows are cut to problem-dependent lengths.
    Shapes: as plain.
    """

    def prepare(self, cfg: Any, tokenizer: Any, run_dir: Any, is_main: bool = True) -> None:
        self._per_problem = PerProblemSampler(PlainSampler(self.config), tokenizer)

    def sample(self, policy: torch.nn.Module, problems: list[Problem], group_size: int,
               ctx: SampleContext) -> Rollouts:
        return self._per_problem.sample(policy, problems, group_size, ctx)
