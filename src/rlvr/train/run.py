"""Whole runs: warm start → (evaluate) → RL → evaluate → summary, as used by the CLI."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import torch

from rlvr.eval.outcomes import write_outcomes
from rlvr.sandbox.pool import active, uses_pool, verifier_pool
from rlvr.train.build import build_task
from rlvr.train.config import Config
from rlvr.train.loop import Runnable, check_runnable
from rlvr.train.run_dir import claim_run_dir
from rlvr.train.trainer import write_summary
from rlvr.train.validate import validate_run
from rlvr.train.warm_start import warm_start_model


def heldout(task: Any, n: int, seed: int) -> list:
    """Held-out problems: the task's test split, disjoint from every training stream."""
    return task.problems(n, seed=seed, split="test")


def evaluate_policy(model: torch.nn.Module, tokenizer: Any, task: Any, problems: list, cfg: Config,
                    k: int, outcomes: list | None = None) -> dict[str, float]:
    from rlvr.eval.strategies import evaluate_under
    return evaluate_under(model, tokenizer, task, problems, cfg, k, outcomes)


def evaluate_run(trainer: Runnable, task: Any, problems: list, cfg: Config,
                 outcomes: list | None = None) -> dict[str, float]:
    """The task's held-out evaluation of the trainer's policy, plus the ``heldout/…`` measures of the
    training loop's own (``trainer.heldout_metrics()``, e.g. LURE's pursuit capture; most have none);
    ``outcomes`` receives the per-problem rows (``rlvr.eval.outcomes``)."""
    own = trainer.heldout_metrics()  # first: a loop may ready its policy there (LURE's own warm start)
    out = evaluate_policy(trainer.policy, trainer.tokenizer, task, problems, cfg, cfg.run.eval_k, outcomes)
    return {**out, **own}


def greedy_eval_fn(tokenizer: Any, task: Any, problems: list, cfg: Config) -> Callable[[torch.nn.Module, int], dict]:
    """A cheap periodic evaluation for learning curves: greedy held-out accuracy only."""
    def fn(model: torch.nn.Module, step: int) -> dict[str, float]:
        result = evaluate_policy(model, tokenizer, task, problems, cfg, k=0)
        return {"eval/accuracy": result["greedy_accuracy"]}
    return fn


def make_trainer(cfg: Config, model: torch.nn.Module | None = None, tokenizer: Any = None,
                 callbacks: list | None = None, parts: Pipeline | None = None, checked: bool = False) -> Runnable:
    """The training loop of the loop plug-in ``optim.name`` names (``plugin.trainer(cfg, model=...,
    tokenizer=...)``): the gradient ``Trainer`` for ``gradient``, a loop of its own for ES and friends, each
    a ``Runnable`` (``rlvr.train.loop``; a loop lacking a member is a TypeError naming it).
    ``callbacks`` (rlvr.train.callbacks) join those named in ``run.callbacks``, after them.
    ``parts``: the plug-ins ``validate_run`` built for a loop that ``builds_pipeline``, reused by it.
    ``checked``: ``train_run`` made the support check already (it makes it once, before any work)."""
    if not checked:
        from rlvr.train.precision import check_supported
        check_supported(cfg)  # ES and friends have their own loop: no mixed precision or mini-batches
    from rlvr.train.build import build_plugin
    from rlvr.train.config import PluginSpec
    plugin = build_plugin("loop", PluginSpec(cfg.optim.name, cfg.optim.params))
    built = {"parts": parts} if parts is not None and plugin.builds_pipeline else {}
    trainer = plugin.trainer(cfg, model=model, tokenizer=tokenizer, **built)
    check_runnable(trainer, f"loop '{cfg.optim.name}'")
    if callbacks:
        trainer.callbacks.add(*callbacks)
    return trainer


def train_run(cfg: Config, resume: bool = False, model: torch.nn.Module | None = None,
              tokenizer: Any = None, callbacks: list | None = None) -> dict[str, Any]:
    """Train per ``cfg`` (warm-starting the tiny model first when configured) and write summary.json.
    Plug-ins, parameters and the run folder are checked first; a fresh run refuses a folder holding
    another run unless ``run.overwrite``; the folder is locked while the run writes it. The evaluations
    before and after verify in the run's verifier pool too."""
    from rlvr.train.precision import check_supported
    check_supported(cfg)  # ES and friends have their own loop: no mixed precision or mini-batches
    require_sandbox(cfg.sandbox.require)
    main = os.environ.get("RANK", "0") == "0"  # data-parallel: rank 0 claims the folder for all
    parts = validate_run(cfg, writes=main)  # the plug-ins it built, for the trainer to reuse
    with claim_run_dir(cfg.run.out_dir, resume=resume, overwrite=cfg.run.overwrite, main=main):
        if resume and main:
            _record_resumed_config(cfg)
        with verifier_pool(cfg.rollout.verify_workers, memory_mb=cfg.rollout.verify_memory_mb):
            return _train_run(cfg, resume, model, tokenizer, callbacks, parts)


def require_sandbox(setting: str) -> None:
    """Stop before anything starts when a layer ``sandbox.require`` names cannot hold here (one line);
    export the setting for the verifier workers started later (``rlvr.sandbox.isolation``)."""
    from rlvr.sandbox.isolation import ENV, required
    if setting != "auto":
        required(setting)  # SandboxUnavailable: the missing layer and the weaker setting
    os.environ[ENV] = setting


def _train_run(cfg: Config, resume: bool, model: torch.nn.Module | None, tokenizer: Any,
               callbacks: list | None, parts: Pipeline | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {}
    if model is None and not resume and cfg.model.path is None:
        model, tokenizer, info = warm_start_model(cfg, task=None if parts is None else parts.task)
    trainer = make_trainer(cfg, model=model, tokenizer=tokenizer, callbacks=callbacks, parts=parts, checked=True)
    task = trainer.parts.task
    pool = active()
    if pool is not None and uses_pool(task, trainer.parts.reward_functions):
        pool.prestart()  # workers start while the policy is evaluated before training
    problems = heldout(task, cfg.run.eval_problems, cfg.run.seed)
    eval_fn = greedy_eval_fn(trainer.tokenizer, task, problems, cfg)
    before, before_rows, after_rows = None, [], []
    here = trainer.evaluates_here()  # the main process; every rank when parameters are sharded
    if not resume and here:
        with trainer.lockstep():
            before = evaluate_run(trainer, task, problems, cfg, before_rows)
        if trainer.acc.is_main_process:
            _write_json_atomic(Path(cfg.run.out_dir) / BEFORE, {"info": info, "before": before,
                                                                "outcomes": before_rows})
    elif resume:
        info, before = _recorded_before(Path(cfg.run.out_dir))
        before_rows = _recorded_before_rows(Path(cfg.run.out_dir))
    result = trainer.train(resume=resume, eval_fn=eval_fn)
    summary: dict[str, Any] = {**info, **result, "run_dir": str(cfg.run.out_dir),
                               "processes": trainer.acc.num_processes}
    if here:
        with trainer.lockstep():
            after = evaluate_run(trainer, task, problems, cfg, after_rows)
    if not trainer.acc.is_main_process:
        return {}
    if trainer.acc.is_main_process:
        from rlvr.models.export import export_policy
        policy = trainer.export_model()  # e.g. TinyLoRA folded
        summary["final"] = str(export_policy(policy, trainer.tokenizer, Path(cfg.run.out_dir) / "final"))
        trainer.callbacks.evaluate(trainer, trainer.step, after)
        summary.update(_before_after(before, after))
        write_outcomes(cfg.run.out_dir, before_rows, after_rows)
        write_summary(cfg.run.out_dir, summary)
    return summary


BEFORE = "eval_before.json"  # RUN/: the warm start's fields and the evaluation before RL, for any resume


def _write_json_atomic(path: Path, data: Any) -> None:
    import json

    from rlvr.files import write_text_atomic
    write_text_atomic(path, json.dumps(data, indent=1, default=str))


def _recorded_before(run_dir: Path) -> tuple[dict[str, Any], dict | None]:
    """(warm-start fields, evaluation before RL) of the run in ``run_dir``, as its first process recorded
    them in RUN/eval_before.json, or, for a run from before that file, as its summary.json holds them."""
    import json
    try:
        saved = json.loads((run_dir / BEFORE).read_text())
        return dict(saved.get("info") or {}), saved.get("before")
    except (OSError, ValueError):
        pass
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}, None
    return {k: v for k, v in summary.items() if k.startswith("warm_start_")}, summary.get("eval_before")


def _recorded_before_rows(run_dir: Path) -> list[dict]:
    """The per-problem rows of the evaluation before RL, as RUN/eval_before.json holds them ([] if not)."""
    import json
    try:
        return list(json.loads((run_dir / BEFORE).read_text()).get("outcomes") or [])
    except (OSError, ValueError):
        return []


def _record_resumed_config(cfg: Config) -> None:
    """Rewrite RUN/config.yaml when the resume changed it (overrides of ``rlvr.cli.RESUME_KEYS``, a
    copied or moved folder), so it describes the run as it continues."""
    from rlvr.train.config import CONFIG_FILE, config_text, write_config
    path = Path(cfg.run.out_dir) / CONFIG_FILE
    if not path.is_file() or path.read_text() != config_text(cfg):
        write_config(path.parent, cfg)


def _before_after(before: dict | None, after: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"eval_after": after, "accuracy_after": after["greedy_accuracy"]}
    if before is not None:
        out.update({"eval_before": before, "accuracy_before": before["greedy_accuracy"],
                    "accuracy_gain": after["greedy_accuracy"] - before["greedy_accuracy"]})
    return out


def evaluate_path(path: str, *, task: str = "arithmetic", problems: int = 200, k: int = 8,
                  max_new_tokens: int = 48, seed: int = 0, strategy: str = "standard",
                  cas: dict[str, Any] | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """Evaluate a saved model folder, or the latest checkpoint of a run folder, with the registered
    ``eval_strategy`` named ``strategy`` built with the options ``cas`` (its ``Config`` fields: for
    ``'cas'``, ``rlvr.eval.cas.CASConfig``'s; CAS runs against majority voting at equal budget).
    ``overrides`` (``key.sub=value``) apply to the run's config, or to the defaults with ``task``."""
    from rlvr.models import load_model, load_tokenizer
    from rlvr.registry import build
    from rlvr.train.config import load_config, replace
    how = build("eval_strategy", strategy, **dict(cas or {}))  # an unknown name or option fails before loading
    folder = Path(path)
    if (folder / "config.yaml").exists():  # a run folder: its config says how the model was built
        from rlvr.train.run_policy import load_run_policy
        cfg = load_config(folder / "config.yaml", overrides)
        model, tokenizer, _ = load_run_policy(folder, overrides)
    else:
        cfg = load_config(None, [f"task.name={task}", *(overrides or [])])
        model, tokenizer = load_model(folder), load_tokenizer(folder)
    cfg = replace(cfg, rollout={"max_new_tokens": max_new_tokens})
    task_obj = build_task(cfg)
    with verifier_pool(cfg.rollout.verify_workers, prestart=uses_pool(task_obj),
                       memory_mb=cfg.rollout.verify_memory_mb):
        result = how.evaluate(model, tokenizer, task_obj, heldout(task_obj, problems, seed), cfg, k=k, seed=seed)
    return {"model": str(folder), "problems": problems, **result}


