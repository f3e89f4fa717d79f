"""DAPO's soft overlong punishment."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import torch
from torch import Tensor

from rlvr.registry import param, register
from rlvr.rewards.base import RewardShaper
from rlvr.types import BatchError, Rollouts


@dataclass(frozen=True)
class OverlongConfig:
    max_length: int | None = param(None, "maximum response length L_max; unset = rollout.max_new_tokens (the "
                                         "trainer fills it in, as verl ties it to the padded response length)")
    buffer: int = param(8, "length of the soft-penalty zone before L_max")
    penalty: float = param(1.0, "penalty factor: the reward drop at L_max; the penalty stays in [-factor, 0]")

    def __post_init__(self) -> None:
        if self.max_length is not None and not 0 < self.buffer <= self.max_length:
            raise ValueError(f"overlong: need 0 < buffer <= max_length, got {self.buffer}, {self.max_length}")
        if self.buffer <= 0 or self.penalty < 0:
            raise ValueError(f"overlong: need buffer > 0 and penalty >= 0, got {self.buffer}, {self.penalty}")


def overlong_penalty(lengths: Tensor, max_length: int, buffer: int, factor: float) -> Tensor:
    """(N,) ``clamp(−(L − (L_max − buffer))/buffer · factor, −factor, 0)`` for response lengths (N,).

    In verl the response can never pass L_max (it is the padded width), so the penalty lies in
    [−factor, 0]; a completion longer than L_max here (a prefix sampler's prefix ⊕ continuation)
    gets the bound −factor, not more.
    """
    exceed = lengths.float() - (max_length - buffer)
    return torch.clamp(-exceed / buffer * factor, min=-factor, max=0.0)


@register("shaper", "overlong")
class Overlong(RewardShaper):
    """Soft overlong punishment: a linear reward penalty inside the last ``buffer`` tokens.

    Paper: Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (arXiv:2503.14476).

    Equation: expected = L_max − buffer; exceed = L_i − expected;
    ``p_i = clamp(−exceed / buffer · factor, −factor, 0)`` and ``r_i += p_i``  (docs/methods.md §1.3).

    The penalty is written as its own objective: objective 0 (the trained scalar) becomes
    ``r_i + p_i`` (named ``overlong_shaped``), ``overlong`` holds ``p_i`` alone, and the verifier's
    verdict stays as the last objective ``correct``, so dynamic sampling can filter on correctness
    (``zero_std`` with ``reward: correct``, as verl's DAPO filters on ``acc``) while the advantage
    trains on the shaped reward.

    Differs from the raw verifier reward:
      * responses longer than L_max − buffer lose up to ``factor``, linearly in their length;
      * shorter responses are unchanged.

    Shapes: rewards (N, K), response lengths (N,) → rewards (N, K + 2) (K + 1 when a shaper before
    already kept the verdict as ``correct``).
    """

    Config = OverlongConfig
    paper = "DAPO: An Open-Source LLM Reinforcement Learning System at Scale (arXiv:2503.14476)"
    run_defaults: ClassVar[dict[str, str]] = {"max_length": "rollout.max_new_tokens"}

    def __call__(self, rollouts: Rollouts) -> Rollouts:
        cfg = self.config
        if cfg.max_length is None:
            raise BatchError("overlong: max_length is unset (the trainer sets it to rollout.max_new_tokens; "
                             "pass max_length when calling the shaper directly)")
        if rollouts.rewards is None:
            raise BatchError("overlong: needs the verifier's rewards (N, K); run it as a shaper after verify")
        pen = overlong_penalty(rollouts.attention.sum(-1), cfg.max_length, cfg.buffer, cfg.penalty)  # (N,)
        pen = pen.to(rollouts.rewards.device)
        names = list(rollouts.reward_names) or ["correct"]
        base = rollouts.rewards.float()
        cols = [base[:, :1] + pen[:, None], base[:, 1:], pen[:, None]]
        new_names = ["overlong_shaped", *names[1:], "overlong"]
        if "correct" not in names[1:]:  # keep the verdict once, as the last objective
            cols.append(base[:, :1])
            new_names.append("correct")
        meta = {**rollouts.meta, "shaper_metrics": {
            **rollouts.meta.get("shaper_metrics", {}),
            "reward/overlong_penalty_mean": pen.mean().item(),
            "reward/overlong_frac": (pen < 0).float().mean().item()}}
        return replace(rollouts, rewards=torch.cat(cols, dim=1), reward_names=new_names, meta=meta)
