"""A known harm for positive controls: flip a fixed fraction of the verifier's rewards."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch

from rlvr.registry import param, register
from rlvr.rewards.base import RewardShaper
from rlvr.types import BatchError, Rollouts


@dataclass(frozen=True)
class RewardFlipConfig:
    rate: float = param(0.25, "fraction of the batch's rewards flipped (r -> 1 - r), exactly round(rate * N) rows")
    seed: int | None = param(None, "seed of which rows flip (with the call count); unset = run.training_seed")

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"reward_flip: rate must be in [0, 1], got {self.rate}")


def flip_rows(n: int, rate: float, seed: int, call: int) -> torch.Tensor:
    """(n,) bool, True on exactly round(rate · n) rows drawn without replacement; the draw depends only
    on (seed, call), so a resumed run flips the same rows as an uninterrupted one."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + call)
    chosen = torch.randperm(n, generator=gen)[:round(rate * n)]
    rows = torch.zeros(n, dtype=torch.bool)
    rows[chosen] = True
    return rows


@register("shaper", "reward_flip")
class RewardFlip(RewardShaper):
    """Positive-control harm: the trained reward of a fixed fraction of rows is flipped, r → 1 − r.

    Not a method: a comparison's ``role: positive_control`` run (the baseline with this shaper added)
    whose harm is known by construction, so a family can show that it detects an effect of the size it
    looks for. With rate ρ a correct answer is rewarded 1 − ρ on average and a wrong one ρ, so the
    expected reward gap between right and wrong shrinks from 1 to 1 − 2ρ (half at ρ = 0.25).

    Equation: F ⊂ {1..N}, |F| = round(ρ·N), drawn uniformly by (seed, call);
    ``r'_i = 1 − r_i`` for i ∈ F, ``r'_i = r_i`` otherwise (objective 0, which must lie in [0, 1]).

    Objective 0 (named ``flipped``) is trained; the verifier's verdict stays as the last objective
    ``correct`` (as the overlong shaper keeps it), so logged correctness is the real one.
    Logs ``reward/flipped_frac``, the fraction of rows flipped (the mechanism firing).

    Shapes: rewards (N, K) → rewards (N, K + 1) (K when a shaper before already kept ``correct``).
    """

    Config = RewardFlipConfig
    paper = "not a paper method: a deliberate harm for positive controls (docs/comparisons.md)"
    run_defaults: ClassVar[dict[str, str]] = {"seed": "run.training_seed"}

    def __init__(self, config: RewardFlipConfig) -> None:
        super().__init__(config)
        self.calls = 0  # batches shaped so far: with the seed, it fixes which rows flip

    def __call__(self, rollouts: Rollouts) -> Rollouts:
        if rollouts.rewards is None:
            raise BatchError("reward_flip: needs the verifier's rewards (N, K); run it as a shaper after verify")
        base = rollouts.rewards.float()  # (N, K)
        first = base[:, 0]
        if bool(((first < 0) | (first > 1)).any()):
            raise BatchError(f"reward_flip: objective 0 must lie in [0, 1] to flip as 1 - r, got "
                             f"[{first.min().item():g}, {first.max().item():g}]")
        rows = flip_rows(base.shape[0], self.config.rate, 0 if self.config.seed is None else self.config.seed,
                         self.calls).to(base.device)  # (N,)
        self.calls += 1
        flipped = torch.where(rows, 1.0 - first, first)
        names = list(rollouts.reward_names) or ["correct"]
        cols, new_names = [flipped[:, None], base[:, 1:]], ["flipped", *names[1:]]
        if "correct" not in names[1:]:
            cols.append(base[:, :1])
            new_names.append("correct")
        meta = {**rollouts.meta, "shaper_metrics": {**rollouts.meta.get("shaper_metrics", {}),
                                                    "reward/flipped_frac": rows.float().mean().item()}}
        return replace(rollouts, rewards=torch.cat(cols, dim=1), reward_names=new_names, meta=meta)

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = int(state["calls"])
