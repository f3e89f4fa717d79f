"""DAPO dynamic sampling: drop groups whose rewards are all equal (they carry no group-relative signal)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.filters.base import BatchFilter
from rlvr.ops import group_stats, masked_sum
from rlvr.registry import param, register
from rlvr.types import BatchError, Rollouts, add_metrics


def keep_groups_mask(scores: Tensor, group_ids: Tensor, tol: float = 0.0, ddof: int = 0) -> Tensor:
    """(N,) bool: True for rows whose group has ``std(scores) > tol`` or has a single row.

    ``scores`` (N,) and ``group_ids`` (N,); groups need not be contiguous. A trainer can count the
    kept groups to decide whether to sample more (DAPO keeps sampling until enough prompts pass).
    """
    stats = group_stats(scores.float(), group_ids, ddof=ddof)
    return (stats.std > tol) | (stats.count == 1)


@dataclass(frozen=True)
class ZeroStdConfig:
    reward: str = param("", "the reward objective to test, by name (reward_names); '' = the scalar the "
                            "advantage estimators use: Σ token_rewards on trained tokens when present, "
                            "else the weighted sum of objectives with `weights`")
    weights: list = param([], "weights (K,) of the objectives when reward=''; empty = objective 0 alone")
    tol: float = param(0.0, "keep a group iff its reward std is greater than this")
    ddof: int = param(0, "std estimator: 0 = population (DAPO's np.std), 1 = unbiased")


@register("filter", "zero_std")
class ZeroStd(BatchFilter):
    """Dynamic sampling: keep a group iff the std of its rewards exceeds ``tol`` or it has one row.

    Paper: Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale"
    (arXiv:2503.14476); verl ``recipe/dapo`` dynamic sampling.

    Rule: keep group g iff ``std_g(s) > tol`` or ``|g| = 1``; whole groups are kept or dropped.

    Differs from no filter:
      * groups where every completion got the same reward (all right or all wrong) are removed, so
        they neither dilute token-mean losses nor count towards the batch size;
      * a trainer keeps sampling until enough groups survive (see ``keep_groups_mask``).

    Shapes: Rollouts with N rows → Rollouts with the rows of the kept groups (order preserved).
    Metrics (added to ``meta["shaper_metrics"]``): ``filter/zero_std_kept_groups``, ``filter/zero_std_groups``.
    """

    Config = ZeroStdConfig
    paper = "DAPO: An Open-Source LLM Reinforcement Learning System at Scale (arXiv:2503.14476)"

    def __call__(self, rollouts: Rollouts) -> Rollouts:
        cfg = self.config
        scores = self.scores(rollouts)  # (N,)
        keep = keep_groups_mask(scores, rollouts.group_ids, tol=cfg.tol, ddof=cfg.ddof)  # (N,)
        out = rollouts.select(keep.nonzero(as_tuple=True)[0])
        out.meta = add_metrics(rollouts.meta, {  # a new dict: select() shares the original's
            "filter/zero_std_kept_groups": float(torch.unique(rollouts.group_ids[keep]).numel()),
            "filter/zero_std_groups": float(torch.unique(rollouts.group_ids).numel())})
        return out

    def scores(self, rollouts: Rollouts) -> Tensor:
        """(N,) the scalar whose group std decides."""
        cfg = self.config
        rewards = rollouts.rewards  # (N, K) or None
        if cfg.reward:
            if rewards is None or cfg.reward not in rollouts.reward_names:
                raise BatchError(f"zero_std: reward '{cfg.reward}' not in reward_names {rollouts.reward_names}")
            return rewards[:, rollouts.reward_names.index(cfg.reward)].float()
        if rollouts.token_rewards is not None:
            return masked_sum(rollouts.token_rewards.float(), rollouts.completion_mask, dim=-1)
        if rewards is None:
            raise BatchError("zero_std: the rollouts have neither rewards nor token_rewards")
        if not cfg.weights:
            return rewards[:, 0].float()
        if len(cfg.weights) != rewards.shape[1]:
            raise BatchError(f"zero_std: {len(cfg.weights)} weights for {rewards.shape[1]} reward objectives")
        return rewards.float() @ torch.tensor(cfg.weights, dtype=torch.float32, device=rewards.device)
