"""Multi-path rollouts: each rollout is P parallel reasoning paths whose answers are aggregated."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.registry import param, register
from rlvr.rollout.samplers.base import SampleContext, Sampler, generation_rollouts, row_group_ids, sample_plain
from rlvr.types import Problem, Rollouts


@dataclass(frozen=True)
class MultiPathConfig:
    paths: int = param(3, "reasoning paths P per rollout (the players of the Shapley game)")

    def __post_init__(self) -> None:
        if self.paths < 1:
            raise ValueError(f"multi_path: paths must be >= 1, got {self.paths}")


@register("sampler", "multi_path")
class MultiPathSampler(Sampler):
    """G multi-path rollouts per prompt, each P independent reasoning paths sampled in parallel.

    Paper: Parallel Shapley, path-level Shapley credit in multi-path reasoning (arXiv id unknown;
    seed abstract), docs/methods.md §2.20 (the rollout half; RECONSTRUCTION of the layout).

    Layout: one row per path. Row ``k`` of problem b is path ``k mod P`` of rollout ``k div P``
    (rollouts numbered across the batch); ``Rollouts.path_rollout`` (N,) and ``path_index`` (N,)
    record it, so every token of row k belongs to path ``path[k]`` — the
    per-token record, without a (N, T) tensor. Paths see only the prompt (parallel paths attend to
    the prompt, never to each other), so a row's trainer forward is exactly its sampling context
    and every token is on-policy. The aggregate answer of a rollout is computed from its paths'
    answers by the shaper (``parallel_shapley``: plurality vote, or best path).

    Differs from plain:
      * N = B·G·P rows instead of B·G; all rows of a prompt share its group id, so GRPO normalises
        a path's reward across the paths of all rollouts of the prompt (docs/methods.md §2.20);
      * with P = 1 it is the plain sampler, row for row.

    Shapes: B problems → N = B·G·P rows; completion ids / mask (N, T); path_rollout / path_index (N,).
    """

    Config = MultiPathConfig
    paper = "Parallel Shapley: path-level Shapley credit in multi-path reasoning (arXiv id unknown; seed abstract)"

    def sample(self, policy: torch.nn.Module, problems: list[Problem], group_size: int,
               ctx: SampleContext) -> Rollouts:
        p = self.config.paths
        per_problem = group_size * p
        rows = [q for q in problems for _ in range(per_problem)]
        gen = sample_plain(policy, rows, ctx, ctx.seed)
        batch = generation_rollouts(rows, gen, row_group_ids(per_problem, len(problems), ctx.group_offset))
        index = torch.arange(len(rows))
        batch.path_rollout, batch.path_index = index // p, index % p  # (N,), (N,)
        batch.meta["sampler_metrics"] = {"rollout/paths_per_rollout": float(p),
                                         "rollout/multi_path_rollouts": float(len(problems) * group_size)}
        return batch
