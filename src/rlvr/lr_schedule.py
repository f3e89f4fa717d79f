"""The learning-rate schedule of every optimizer rlvr builds (the RL policy, the critic, the
supervised warm start): linear warm-up over ``warmup`` optimizer steps, then constant, linear decay
to 0 at ``steps``, or cosine decay to 0."""

from __future__ import annotations

import math
from typing import Callable

import torch

SCHEDULES = ("constant", "linear", "cosine")


def lr_factor(schedule: str, warmup: int, steps: int) -> Callable[[int], float]:
    """Multiplier of the base rate at optimizer step s (0-based)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule '{schedule}'; valid: {', '.join(SCHEDULES)}")

    def factor(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        frac = min((s - warmup) / max(1, steps - warmup), 1.0)  # 0 → 1 over the post-warm-up steps
        if schedule == "linear":
            return 1.0 - frac
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * frac))
        return 1.0

    return factor


def lr_schedule(optimizer: torch.optim.Optimizer, schedule: str, warmup: int,
                steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """``optimizer``'s rate scheduled by :func:`lr_factor` (one ``step()`` per optimizer step)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(schedule, warmup, steps))
