"""The plain sampler: G independent completions of each prompt from the current policy."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.registry import param, register
from rlvr.rollout.samplers.base import SampleContext, Sampler, generation_rollouts, row_group_ids, sample_plain
from rlvr.types import Problem, Rollouts


@dataclass(frozen=True)
class PlainConfig:
    keep_hidden: bool = param(False, "also keep the output layer's inputs of every generated token in "
                                     "Rollouts.hidden (N, T, H) float32, for shapers that read them (GAR)")


@register("sampler", "plain")
class PlainSampler(Sampler):
    """G completions per prompt from the policy, all on-policy and all trained (GRPO's sampler).

    Every guided sampler reduces to this one, token for token, when its guidance fraction is 0.

    Shapes: B problems → N = B·G rows; completion ids / mask (N, T); with ``keep_hidden``,
    ``Rollouts.hidden`` (N, T, H) (GAR reads it while shaping and drops it).
    """

    Config = PlainConfig
    runs_in_worker = True  # the policy alone: the generator process of async generation runs it

    def sample(self, policy: torch.nn.Module, problems: list[Problem], group_size: int,
               ctx: SampleContext) -> Rollouts:
        rows = [p for p in problems for _ in range(group_size)]
        gen = sample_plain(policy, rows, ctx, ctx.seed, keep_hidden=self.config.keep_hidden)
        batch = generation_rollouts(rows, gen, row_group_ids(group_size, len(problems), ctx.group_offset))
        if gen.hidden is not None:
            batch.hidden = gen.hidden  # (N, T, H)
        return batch
