"""The plain sampler: G independent completions of each prompt from the current policy."""

from __future__ import annotations

import torch

from rlvr.registry import register
from rlvr.rollout.samplers.base import SampleContext, Sampler, generation_rollouts, row_group_ids, sample_plain
from rlvr.types import Problem, Rollouts


@register("sampler", "plain")
class PlainSampler(Sampler):
    """G completions per prompt from the policy, all on-policy and all trained (GRPO's sampler).

    Every guided sampler reduces to this one, token for token, when its guidance fraction is 0.

    Shapes: B problems → N = B·G rows; completion ids / mask (N, T).
    """

    def sample(self, policy: torch.nn.Module, problems: list[Problem], group_size: int,
               ctx: SampleContext) -> Rollouts:
        rows = [p for p in problems for _ in range(group_size)]
        gen = sample_plain(policy, rows, ctx, ctx.seed)
        return generation_rollouts(rows, gen, row_group_ids(group_size, len(problems), ctx.group_offset))
