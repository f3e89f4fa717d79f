"""DAPO's soft overlong punishment."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from rlvr.registry import param, register
from rlvr.rewards.base import RewardShaper
from rlvr.types import Rollouts


@dataclass(frozen=True)
class OverlongConfig:
    max_length: int = param(48, "maximum response length L_max (set it to rollout.max_new_tokens)")
    buffer: int = param(8, "length of the soft-penalty zone before L_max")
    penalty: float = param(1.0, "penalty factor: the reward drop at L_max")
    column: int = param(0, "which reward objective (column of rewards (N, K)) is penalised")

    def __post_init__(self) -> None:
        if not 0 < self.buffer <= self.max_length:
            raise ValueError(f"overlong: need 0 < buffer <= max_length, got {self.buffer}, {self.max_length}")


@register("shaper", "overlong")
class Overlong(RewardShaper):
    """Soft overlong punishment: a linear reward penalty inside the last ``buffer`` tokens.

    Paper: Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (arXiv:2503.14476).

    Equation: expected = L_max − buffer; exceed = L_i − expected;
    ``r_i += min(−exceed / buffer · penalty, 0)``  (METHODS.md §1.3).

    Differs from the raw verifier reward:
      * responses longer than L_max − buffer lose up to ``penalty``, linearly in their length;
      * shorter responses are unchanged.

    Shapes: rewards (N, K), response lengths (N,) → rewards (N, K).
    """

    Config = OverlongConfig
    paper = "DAPO: An Open-Source LLM Reinforcement Learning System at Scale (arXiv:2503.14476)"

    def __call__(self, rollouts: Rollouts) -> Rollouts:
        cfg = self.config
        lengths = rollouts.attention.sum(-1).float()  # (N,)
        exceed = lengths - (cfg.max_length - cfg.buffer)
        penalty = torch.clamp(-exceed / cfg.buffer * cfg.penalty, max=0.0)  # (N,)
        rewards = rollouts.rewards.clone()
        rewards[:, cfg.column] += penalty
        return replace(rollouts, rewards=rewards)
