"""TTRL: test-time RL with majority-vote pseudo-labels instead of gold answers."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from rlvr.registry import param, register
from rlvr.rewards.base import RewardShaper
from rlvr.rewards.consensus import (TIES, answer_keys, consensus_metrics, gold_metrics, majority_labels,
                                    parsed_answers, with_pseudo_reward)
from rlvr.types import Rollouts


@dataclass(frozen=True)
class TTRLConfig:
    ties: str = param("first", "a tied vote: 'first' (the tied answer appearing first in the group, as "
                               "Counter.most_common) | 'skip' (no label: every row of the group gets 0)")
    normalise: bool = param(True, "compare answers after normalisation (case, spaces, $, trailing '.'); "
                                  "False = exact strings")

    def __post_init__(self) -> None:
        if self.ties not in TIES:
            raise ValueError(f"ttrl: ties must be one of {TIES}, got '{self.ties}'")


@register("shaper", "ttrl")
class TTRL(RewardShaper):
    """TTRL majority-vote reward: agree with the group's most common answer, get 1.

    Paper: Zuo et al., "TTRL: Test-Time Reinforcement Learning" (arXiv:2504.16084), docs/methods.md §1.8.

    Equation: for group g with parsed answers a_1..a_n, ``ŷ_g = mode(a)``, ``r_i = 1[a_i = ŷ_g]``
    (then GRPO on r); consensus strength ``c_g = count(ŷ_g)/n``. Unparsed answers (None) never vote
    and get 0; a group with no parsed answer has no label (all 0, c = 0). The tie rule is ``ties``
    (not stated in the abstract; ``first`` matches the reference code's ``Counter.most_common``).

    Label-free: the reward reads only the verifier's parsed answers (``Rollouts.parsed``), never
    ``problem.answer`` nor the verdict. The verdict is kept as a last, metric-only objective
    ``correct`` (0 where a problem has no gold answer).

    Differs from the verifier reward:
      * objective 0 becomes the pseudo-label reward, named ``ttrl``;
      * the reward depends on the other rows of the group (a consensus, not a check).

    Shapes: parsed (N,), group_ids (N,), rewards (N, K) → rewards (N, K + 1). Metrics
    (``meta["shaper_metrics"]``): ``reward/consensus`` (mean c over groups),
    ``reward/answer_entropy`` (mean entropy of each group's answer distribution, nats: the collapse
    diagnostic), ``reward/answered_frac``, ``reward/pseudo_mean`` and, where gold answers exist,
    ``reward/gold_accuracy`` and ``reward/label_accuracy`` (share of pseudo-labels that are right).
    """

    Config = TTRLConfig
    paper = "TTRL: Test-Time Reinforcement Learning (arXiv:2504.16084)"

    def __call__(self, rollouts: Rollouts) -> Rollouts:
        keys = answer_keys(parsed_answers(rollouts, "ttrl"), self.config.normalise)
        group_ids = rollouts.group_ids.cpu()
        agrees, strength, _ = majority_labels(keys, group_ids, self.config.ties)  # (N,), (N,)
        reward = agrees.float()  # (N,)
        rewards, names = with_pseudo_reward(rollouts, reward, "ttrl")
        metrics = {**consensus_metrics(keys, group_ids, strength), "reward/pseudo_mean": reward.mean().item(),
                   **gold_metrics(rollouts, agrees)}
        meta = {**rollouts.meta, "shaper_metrics": {**rollouts.meta.get("shaper_metrics", {}), **metrics}}
        return replace(rollouts, rewards=rewards, reward_names=names, meta=meta,
                       row_stats={**rollouts.row_stats, "consensus": strength})


def ttrl_rewards(parsed: list[str | None], group_ids: torch.Tensor, ties: str = "first") -> torch.Tensor:
    """(N,) TTRL rewards of parsed answers (a functional form for tests and integrations)."""
    agrees, _, _ = majority_labels(answer_keys(parsed), group_ids.cpu(), ties)
    return agrees.float()
