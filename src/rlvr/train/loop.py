"""The one loop skeleton every training loop runs (docs/design.md §11): budgets, steps, end-of-step
bookkeeping, periodic evaluation and checkpoints, callbacks, progress bar and logging.

A loop (the gradient ``Trainer``, ES, Hyper-ES, Progressive RLVR) says what one of its steps is and how
it saves itself; ``run_loop`` does the rest the same way for all of them:

    begin(resume) → while no budget is spent: loop_step → end_step (step and budgets advance, periodic
    evaluation, log, callbacks) → periodic save → finish → final save

``run.max_rollouts`` is a hard cap: before each step the loop says the fewest completions that step
will sample (``next_step_cost``), and a step that would take the count past the cap is not started.

Two protocols, checked by members rather than by ``hasattr`` probes at the call sites:

* ``Runnable``: what ``rlvr.train.run.train_run`` drives, the object a loop plug-in's
  ``trainer(cfg, ...)`` returns (``rlvr.train.loop_plugin``). A loop of loops (GRPO → ES) is one.
* ``TrainingLoop``: a ``Runnable`` that ``run_loop`` can drive step by step.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from tqdm.auto import tqdm

from rlvr.train.budget import budget_reason, progress
from rlvr.train.callbacks import Callbacks
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.config import to_dict
from rlvr.train.logging import RunLogger
from rlvr.train.memory import step_memory
from rlvr.train.pipeline import Pipeline


@dataclass
class StepOutput:
    """What one step of a loop hands ``run_loop``."""

    metrics: dict[str, float]  # the step's metrics; end_step adds the budgets and any evaluation
    sampled: int  # completions sampled this step on all ranks (the rollout budget)
    samples: list[dict[str, Any]] = field(default_factory=list)  # rows for samples.jsonl
    postfix: dict[str, str] = field(default_factory=dict)  # figures on the progress bar


@runtime_checkable
class Runnable(Protocol):
    """A training run as ``train_run`` drives it: ``train`` it, evaluate and export its policy."""

    acc: Any  # is_main_process, num_processes, process_index (an Accelerator, or one process)
    callbacks: Callbacks  # rlvr.train.callbacks, called in order
    parts: Pipeline  # the built plug-ins (rlvr.train.pipeline); the task at least
    tokenizer: Any
    step: int  # optimizer steps done (what callbacks and the final evaluation are given)

    @property
    def policy(self) -> torch.nn.Module:
        """The policy to generate and evaluate with (unwrapped)."""

    def train(self, resume: bool = False, eval_fn: Any = None) -> dict[str, Any]:
        """Run to a budget; the summary: steps, rollouts, seconds, stopped_by (and the loop's own fields)."""

    def heldout_metrics(self) -> dict[str, float]:
        """The loop's own held-out measures beside the task's evaluation (LURE: pursuit capture); {} if none."""

    def export_model(self) -> torch.nn.Module:
        """The policy to write as RUN/final (in its base architecture)."""

    def evaluates_here(self) -> bool:
        """Whether this rank runs evaluations: the main process, or every rank when parameters are sharded."""

    def lockstep(self) -> AbstractContextManager:
        """The context every rank evaluates in (lock-step forwards when sharded; else a no-op)."""


@runtime_checkable
class TrainingLoop(Runnable, Protocol):
    """A loop ``run_loop`` drives: the counters it advances and the four things only the loop knows."""

    cfg: Any  # the run config (rlvr.train.config.Config); run.* holds budgets and cadences
    run_dir: Path
    rollouts_spent: int  # completions sampled so far, all ranks, across resumes
    seconds_spent: float  # training wall-clock so far, across resumes

    def begin(self, resume: bool) -> dict[str, float]:
        """Before the first step: restore the latest checkpoint (``resume``) or write the run files and
        do the loop's set-up (directions, a teacher). Returns metrics for the first step's row."""

    def loop_step(self) -> StepOutput:
        """One optimizer step (one ES iteration, one CMA-ES generation, ...); does not advance ``step``."""

    def next_step_cost(self) -> int:
        """The fewest completions the next step samples on all ranks (ES: its whole population; the
        gradient trainer: its first sampling round, as last seen), so ``run_loop`` starts no step past
        ``run.max_rollouts``; 0 when not known yet. The same on every rank."""

    def save(self) -> Path | None:
        """Write a checkpoint of step ``step``; its folder on the main process, None on the others."""

    def state(self) -> dict[str, Any]:
        """The plain data a checkpoint carries beside the weights (budget counters, plug-in states)."""

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what ``state`` returned, from a checkpoint's state.json (``step`` included)."""

    def finish(self) -> dict[str, Any]:
        """After the last step, before the final checkpoint: closing work (Progressive quantises its
        adapter) and the summary's own fields."""


def missing_members(obj: Any, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks (empty when it satisfies it)."""
    bases = [b for b in protocol.__mro__ if getattr(b, "_is_protocol", False) and b is not Protocol]
    names = {name for b in bases for name in [*vars(b).get("__annotations__", {}), *vars(b)]
             if not name.startswith("_")}
    return sorted(name for name in names if not hasattr(obj, name))


def check_runnable(obj: Any, where: str) -> None:
    """A clear error when ``obj`` (a plug-in's training loop) is not a ``Runnable``."""
    missing = missing_members(obj, Runnable)
    if missing:
        raise TypeError(f"{where}: its training loop {type(obj).__name__} lacks {', '.join(missing)} "
                        f"(the Runnable protocol of rlvr.train.loop)")


def counters(loop: TrainingLoop) -> dict[str, Any]:
    """The budget counters a checkpoint's state carries (the step is saved by ``save_checkpoint``)."""
    return {"rollouts_spent": loop.rollouts_spent, "seconds_spent": loop.seconds_spent}


def load_counters(loop: TrainingLoop, state: dict[str, Any]) -> None:
    """Set ``step`` and the budget counters from a checkpoint's state (counters absent: 0)."""
    loop.step = int(state["step"])
    loop.rollouts_spent = int(state.get("rollouts_spent", 0))
    loop.seconds_spent = float(state.get("seconds_spent", 0.0))


def latest_or_raise(run_dir: Path) -> Path:
    """The latest verified checkpoint of ``run_dir``, or FileNotFoundError naming where none was."""
    path = latest_checkpoint(run_dir)
    if path is None:
        raise FileNotFoundError(f"no checkpoint to resume from in {Path(run_dir) / 'checkpoints'}")
    return path


def run_loop(loop: TrainingLoop, resume: bool = False, eval_fn: Any = None, desc: str = "rl") -> dict[str, Any]:
    """Train ``loop`` until a budget (``run.steps``, ``run.max_rollouts``, ``run.max_seconds``) or a
    callback ends it; checkpoint every ``run.save_every`` steps and once at the end (unless a resume
    found nothing to do); ``eval_fn(policy, step)`` every ``run.eval_every`` steps. Returns the
    summary: steps, rollouts, seconds, stopped_by, and the fields of ``loop.finish()``."""
    first = loop.begin(resume)
    saved = loop.step if resume else None  # the step of the checkpoint on disk, when known
    run = loop.cfg.run
    main = loop.acc.is_main_process
    logger = RunLogger(loop.run_dir, enabled=main, resume_step=loop.step, report_to=run.report_to,
                       table_every=run.table_every, config=to_dict(loop.cfg))
    unit, done, total = _progress(loop)  # the bar counts the budget's own unit, not a sentinel step count
    bar = tqdm(total=total, initial=done, desc=desc, unit=unit, disable=not main)
    reason = _budget(loop)
    while reason is None:
        start = time.perf_counter()
        out = loop.loop_step()
        metrics = {**out.metrics, **first}
        first = {}  # the set-up's metrics go with the first step only
        stop = end_step(loop, metrics, out.sampled, start, eval_fn, logger)
        logger.samples(loop.step, out.samples)
        bar.set_postfix(**out.postfix)
        bar.update(_progress(loop)[1] - bar.n)
        if stop:
            reason = "callback"
            break
        reason = _budget(loop)  # before the periodic save: the last step is saved once, below
        if reason is None and run.save_every and loop.step % run.save_every == 0:
            saved = _save(loop)
    bar.close()
    extra = loop.finish()
    if saved != loop.step:
        _save(loop)
    logger.close()
    return {"steps": loop.step, "rollouts": loop.rollouts_spent, "seconds": loop.seconds_spent,
            "stopped_by": reason, **extra}


def end_step(loop: TrainingLoop, metrics: dict[str, float], sampled: int, started: float, eval_fn: Any,
             logger: RunLogger) -> bool:
    """The bookkeeping after one step: advance the step and the rollout / wall-clock budgets, add them to
    ``metrics``, run the periodic evaluation (where ``loop.evaluates_here()``), log, and call the
    callbacks. ``sampled`` is the completions this step sampled on all ranks. True when a callback
    asked to stop the run."""
    loop.step += 1
    loop.rollouts_spent += sampled
    loop.seconds_spent += time.perf_counter() - started
    metrics.update({"rollout/spent": loop.rollouts_spent, "time/elapsed": loop.seconds_spent})
    metrics.update(step_memory())
    run = loop.cfg.run
    if eval_fn is not None and run.eval_every and loop.step % run.eval_every == 0 and loop.evaluates_here():
        from rlvr.rollout.engines.base import generation_phase  # lazy: loop.py stays light to import
        with generation_phase():  # one wake/sleep of a sleeping engine for the whole evaluation
            evaluation = eval_fn(loop.policy, loop.step)
        metrics.update(evaluation)
        loop.callbacks.evaluate(loop, loop.step, evaluation)
    logger.log(loop.step, metrics)
    return loop.callbacks.step_end(loop, loop.step, metrics)


def _progress(loop: TrainingLoop) -> tuple[str, float, float]:
    return progress(loop.cfg.run, loop.step, loop.rollouts_spent, loop.seconds_spent)


def _budget(loop: TrainingLoop) -> str | None:
    """Which budget ended the run, or None (a collective over ranks with a seconds budget). The rollout
    budget is a hard cap: no step starts that would sample past it."""
    return budget_reason(loop.cfg.run, loop.step, loop.rollouts_spent, loop.seconds_spent, loop.acc,
                         next_cost=loop.next_step_cost())


def _save(loop: TrainingLoop) -> int:
    """Checkpoint the loop and tell the callbacks (main process); the step saved."""
    path = loop.save()
    if path is not None:
        loop.callbacks.save(loop, loop.step, path)
    return loop.step
