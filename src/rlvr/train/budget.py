"""Run budgets: which of ``run.steps``, ``run.max_rollouts`` and ``run.max_seconds`` ends a run (the
loop that advances them is ``rlvr.train.loop``)."""

from __future__ import annotations

from typing import Any

import torch

from rlvr.collectives import collective_device


def budget_reason(run: Any, step: int, rollouts: int, seconds: float, acc: Any = None,
                  next_cost: int = 0) -> str | None:
    """Which budget (steps, rollouts, seconds) ends a run, or None to go on. ``next_cost``: the fewest
    completions the next step samples; the rollout budget ends the run when that step would pass it
    (a hard cap: never more than ``run.max_rollouts``). With ``acc`` (an Accelerator) over several
    processes and a seconds budget, the slowest rank's time is used so every rank stops at the same
    step (a collective: every rank must call it)."""
    if acc is not None and acc.num_processes > 1 and run.max_seconds:
        local = torch.tensor(seconds, dtype=torch.float64, device=collective_device(acc))  # () on its device
        seconds = acc.reduce(local, reduction="max").item()
    if step >= run.steps:
        return "steps"
    if run.max_rollouts and (rollouts >= run.max_rollouts or rollouts + next_cost > run.max_rollouts):
        return "rollouts"
    if run.max_seconds and seconds >= run.max_seconds:
        return "seconds"
    return None


def progress(run: Any, step: int, rollouts: int, seconds: float) -> tuple[str, float, float]:
    """What a progress bar counts, how far the run is and the total: completions when ``run.max_rollouts``
    is set (a comparison with a rollout budget sets ``run.steps`` to a huge sentinel, so a bar in steps
    would show a meaningless total), else seconds trained when ``run.max_seconds`` is set, else steps."""
    if run.max_rollouts:
        return "rollouts", rollouts, run.max_rollouts
    if run.max_seconds:
        return "seconds", round(seconds, 1), run.max_seconds
    return "steps", step, run.steps
