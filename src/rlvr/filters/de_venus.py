"""DE-Venus refinement filter: drop groups whose training target is not trusted enough."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.filters.base import BatchFilter
from rlvr.ops import group_stats
from rlvr.registry import param, register
from rlvr.types import BatchError, Rollouts, add_metrics


@dataclass(frozen=True)
class LowConfidenceConfig:
    tau_c: float | None = param(None, "drop a group when its target confidence is below τ_c "
                                      "(required: docs/methods.md §2.2 lists no default; 0 keeps every group)")

    def __post_init__(self) -> None:
        if self.tau_c is None or not 0.0 <= self.tau_c <= 1.0:
            raise ValueError(f"de_venus filter: tau_c is required, in [0, 1]; got {self.tau_c}")


@register("filter", "de_venus")
class LowConfidence(BatchFilter):
    """Refinement-filter: keep a group iff the confidence of its target is at least τ_c.

    Paper: "DE-Venus: a data-efficient RLVR framework" (arXiv id unknown; seed abstract), docs/methods.md §2.2
    ("Training-Time Supervision Refinement"). RECONSTRUCTION: the rule "drop a group if
    confidence < τ_c" is the docs/methods.md §2.2 reading of the abstract.

    Confidence per row comes from ``row_stats["target_confidence"]`` (the ``de_venus`` shaper: 1 for
    gold, the majority's consensus for pseudo-labels) or, failing that, TTRL's ``row_stats["consensus"]``.
    A group's confidence is the mean over its rows (they share one value when a shaper wrote it).

    Differs from no filter: whole groups with unreliable targets are removed before the advantage;
    τ_c = 0 keeps everything (identity). Run it before any other filter (it reads per-row stats).

    Shapes: Rollouts with N rows → the rows of the kept groups (order preserved). Metrics (added to
    ``meta["shaper_metrics"]``): ``filter/low_confidence_kept_groups``, ``filter/low_confidence_groups``.
    """

    Config = LowConfidenceConfig
    paper = "DE-Venus: a data-efficient RLVR framework (arXiv id unknown; seed abstract)"

    def __call__(self, rollouts: Rollouts) -> Rollouts:
        conf = rollouts.row_stats.get("target_confidence", rollouts.row_stats.get("consensus"))
        if conf is None:
            raise BatchError(f"de_venus filter: needs row_stats['target_confidence'] (or 'consensus') for all "
                             f"{rollouts.num_rows} rows; run the de_venus (or ttrl) shaper first and this "
                             f"filter before any other")
        gids = rollouts.group_ids
        mean = group_stats(torch.as_tensor(conf, dtype=torch.float32).to(gids.device), gids, ddof=0).mean  # (N,)
        keep = mean >= self.config.tau_c - 1e-6  # (N,) whole groups: every row carries its group's mean
        rows = keep.nonzero(as_tuple=True)[0]
        out = rollouts.select(rows)
        metrics = {"filter/low_confidence_kept_groups": float(torch.unique(gids[keep]).numel()),
                   "filter/low_confidence_groups": float(torch.unique(gids).numel())}
        out.meta = add_metrics(rollouts.meta, metrics)
        return out
