"""Anchor rollouts (ARMOR): part of every group is sampled from the frozen reference policy."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.registry import param, register
from rlvr.rollout.samplers.base import (SampleContext, Sampler, behaviour_logprobs, generation_rollouts,
                                        mixed_groups, row_group_ids, sample_plain)
from rlvr.types import Origin, Problem, Rollouts


@dataclass(frozen=True)
class AnchorConfig:
    anchors: int = param(2, "G_anc: rows of each group sampled from the frozen reference policy (of G); "
                            "0 = the plain sampler exactly")

    def __post_init__(self) -> None:
        if self.anchors < 0:
            raise ValueError(f"anchor: anchors must be >= 0, got {self.anchors}")


@register("sampler", "anchor")
class AnchorSampler(Sampler):
    """ARMOR's anchor rollouts: reference-policy samples keep established solutions in every group.

    Paper: "ARMOR: Anchor Rollout + Mixed Optimization" (seed abstract; arXiv id unknown).
    RECONSTRUCTION (docs/methods.md §2.24): each group of x holds ``G − G_anc`` rows from pi_old and
    ``G_anc`` anchors ``~ pi_ref(·|x)``, rewarded by the same verifier, advantages over the mixed
    group. Anchor tokens have origin REFERENCE and are trained; their ``behaviour_logprobs`` are
    ``log pi_ref(y_t|x, y_<t)`` from the trainer-style forward of the frozen reference, so a loss
    such as ``armor`` can form ``rho_anc = pi_theta / pi_ref``.

    Differs from the plain sampler:
      * G_anc rows per group come from the frozen reference weights, not the current policy;
      * those rows carry reference log-probs (behaviour) and origin REFERENCE;
      * ``anchors = 0`` is the plain sampler, token for token.

    Shapes: B problems → N = B·G rows; behaviour_logprobs (N, T) (0 on policy rows).
    """

    Config = AnchorConfig
    paper = "ARMOR: Anchor Rollout + Mixed Optimization (seed abstract; arXiv id unknown)"
    needs_reference = True

    @property
    def produces_off_policy(self) -> bool:  # type: ignore[override]
        return self.config.anchors > 0

    def sample(self, policy: torch.nn.Module, problems: list[Problem], group_size: int,
               ctx: SampleContext) -> Rollouts:
        a = self.config.anchors
        if a > group_size:
            raise ValueError(f"anchor: anchors={a} exceeds the group size G={group_size}")
        if a and ctx.reference is None:
            raise ValueError("anchor: the sampler needs the trainer's frozen reference model")
        out = mixed_groups(policy, problems, group_size - a, a, lambda rows: self._anchors(rows, a, ctx), ctx)
        if a:
            out.meta["sampler_metrics"] = {"rollout/anchor_rows_frac": a / group_size}
        return out

    def _anchors(self, rows: list[Problem], a: int, ctx: SampleContext) -> Rollouts:
        gen = sample_plain(ctx.reference, rows, ctx, ctx.seed + 104_729)
        out = generation_rollouts(rows, gen, row_group_ids(a, len(rows) // a, ctx.group_offset))
        real = out.completion_mask
        out.token_origin = torch.where(real, int(Origin.REFERENCE), int(Origin.POLICY)).to(torch.uint8)
        out.behaviour_logprobs = behaviour_logprobs(ctx.reference, gen.prompt_ids, gen.prompt_mask,
                                                    gen.completion_ids, real, ctx.rollout.temperature)
        return out
