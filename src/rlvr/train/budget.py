"""Run budgets: which of ``run.steps``, ``run.max_rollouts`` and ``run.max_seconds`` ends a run, and the
per-step bookkeeping that advances them."""

from __future__ import annotations

import time
from typing import Any

import torch

from rlvr.train.sharding import evaluates_here


def budget_reason(run: Any, step: int, rollouts: int, seconds: float, acc: Any = None) -> str | None:
    """Which budget (steps, rollouts, seconds) ends a run, or None to go on. With ``acc`` (an
    Accelerator) over several processes and a seconds budget, the slowest rank's time is used so
    every rank stops at the same step (a collective: every rank must call it)."""
    if acc is not None and acc.num_processes > 1 and run.max_seconds:
        seconds = acc.reduce(torch.tensor(seconds, dtype=torch.float64), reduction="max").item()
    if step >= run.steps:
        return "steps"
    if run.max_rollouts and rollouts >= run.max_rollouts:
        return "rollouts"
    if run.max_seconds and seconds >= run.max_seconds:
        return "seconds"
    return None


def end_step(trainer: Any, metrics: dict[str, float], sampled: int, started: float, eval_fn: Any,
             logger: Any) -> bool:
    """The bookkeeping after one optimizer step that every trainer loop shares: advance the step and
    the rollout / wall-clock budgets, add them to ``metrics``, run the periodic evaluation (main
    process only; every rank in lock-step when parameters are sharded), log, and call the callbacks. ``trainer`` has ``step``, ``rollouts_spent``,
    ``seconds_spent``, ``cfg``, ``acc``, ``policy`` and optionally ``callbacks``
    (``rlvr.train.callbacks.Callbacks``); ``sampled`` is the completions this step sampled on all
    ranks. Returns True when a callback asked to stop the run."""
    trainer.step += 1
    trainer.rollouts_spent += sampled
    trainer.seconds_spent += time.perf_counter() - started
    metrics.update({"rollout/spent": trainer.rollouts_spent, "time/elapsed": trainer.seconds_spent})
    run = trainer.cfg.run
    callbacks = getattr(trainer, "callbacks", None)
    if eval_fn is not None and evaluates_here(trainer) and run.eval_every and trainer.step % run.eval_every == 0:
        evaluation = eval_fn(trainer.policy, trainer.step)
        metrics.update(evaluation)
        if callbacks is not None:
            callbacks.evaluate(trainer, trainer.step, evaluation)
    logger.log(trainer.step, metrics)
    return callbacks is not None and callbacks.step_end(trainer, trainer.step, metrics)
