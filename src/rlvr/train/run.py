"""Whole runs: warm start → (evaluate) → RL → evaluate → summary, as used by the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from rlvr.train.build import build_model, build_task
from rlvr.train.config import Config
from rlvr.train.trainer import Trainer, write_summary


def warm_start_model(cfg: Config) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """The configured policy, supervised on task demonstrations when ``warm_start.steps > 0``."""
    from rlvr.sft import warm_start
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    torch.manual_seed(cfg.run.seed)
    model, tokenizer = build_model(cfg)
    info: dict[str, Any] = {"warm_start_steps": cfg.warm_start.steps}
    if cfg.warm_start.steps > 0:
        ws, task = cfg.warm_start, build_task(cfg)
        stop_when = _accuracy_reached(model, tokenizer, task, cfg, info) if ws.target_accuracy > 0 else None
        result = warm_start(model, tokenizer, task, steps=max(ws.max_steps, ws.steps) if stop_when else ws.steps,
                            batch_size=ws.batch_size, lr=ws.lr, warmup=ws.warmup, seed=cfg.run.seed,
                            stop_when=stop_when, min_steps=ws.steps, check_every=ws.check_every)
        info.update({f"warm_start_{k}": v for k, v in result.items()})
    return model, tokenizer, info


def _accuracy_reached(model: torch.nn.Module, tokenizer: Any, task: Any, cfg: Config,
                      info: dict[str, Any]) -> Callable[[int], bool]:
    """Stop rule for the warm start: greedy accuracy on 100 validation problems (drawn from the
    train split, never the held-out one) has reached ``warm_start.target_accuracy``."""
    from rlvr.eval import evaluate
    problems = task.problems(100, seed=10**6 + cfg.run.seed)
    info["warm_start_validation"] = []

    def stop(step: int) -> bool:
        acc = evaluate(model, tokenizer, task, problems, k=0, max_new_tokens=cfg.rollout.max_new_tokens)
        info["warm_start_validation"].append((step, acc["greedy_accuracy"]))
        return acc["greedy_accuracy"] >= cfg.warm_start.target_accuracy
    return stop


def heldout(task: Any, n: int, seed: int) -> list:
    """Held-out problems: the task's test split, disjoint from every training stream."""
    return task.problems(n, seed=seed, split="test")


def evaluate_policy(model: torch.nn.Module, tokenizer: Any, task: Any, problems: list, cfg: Config,
                    k: int) -> dict[str, float]:
    from rlvr.eval import evaluate
    return evaluate(model, tokenizer, task, problems, k=k, max_new_tokens=cfg.rollout.max_new_tokens,
                    temperature=cfg.rollout.temperature, seed=cfg.run.seed)


def greedy_eval_fn(tokenizer: Any, task: Any, problems: list, cfg: Config) -> Callable[[torch.nn.Module, int], dict]:
    """A cheap periodic evaluation for learning curves: greedy held-out accuracy only."""
    def fn(model: torch.nn.Module, step: int) -> dict[str, float]:
        result = evaluate_policy(model, tokenizer, task, problems, cfg, k=0)
        return {"eval/accuracy": result["greedy_accuracy"]}
    return fn


def make_trainer(cfg: Config, model: torch.nn.Module | None = None, tokenizer: Any = None) -> Any:
    """The gradient ``Trainer`` for ``optim.name: adamw``; otherwise the registered optimizer plug-in's
    own trainer (``plugin.trainer(cfg, model=..., tokenizer=...)``), which offers the same surface:
    ``train(resume, eval_fn)``, ``policy``, ``tokenizer``, ``parts["task"]`` and ``acc``."""
    from rlvr.train.precision import check_supported
    check_supported(cfg)  # ES and friends have their own loop: no mixed precision or mini-batches
    if cfg.optim.name == "adamw":
        return Trainer(cfg, model=model, tokenizer=tokenizer)
    from rlvr.train.build import build_plugin
    from rlvr.train.config import PluginSpec
    plugin = build_plugin("optimizer", PluginSpec(cfg.optim.name, cfg.optim.params))
    return plugin.trainer(cfg, model=model, tokenizer=tokenizer)


def train_run(cfg: Config, resume: bool = False, model: torch.nn.Module | None = None,
              tokenizer: Any = None) -> dict[str, Any]:
    """Train per ``cfg`` (warm-starting the tiny model first when configured) and write summary.json."""
    from rlvr.train.precision import check_supported
    check_supported(cfg)  # before the warm start: a bad combination fails before any work
    info: dict[str, Any] = {}
    if model is None and not resume and cfg.model.path is None:
        model, tokenizer, info = warm_start_model(cfg)
    trainer = make_trainer(cfg, model=model, tokenizer=tokenizer)
    task = trainer.parts["task"]
    problems = heldout(task, cfg.run.eval_problems, cfg.run.seed)
    eval_fn = greedy_eval_fn(trainer.tokenizer, task, problems, cfg)
    before = None
    if not resume and trainer.acc.is_main_process:
        before = evaluate_policy(trainer.policy, trainer.tokenizer, task, problems, cfg, cfg.run.eval_k)
    result = trainer.train(resume=resume, eval_fn=eval_fn)
    summary: dict[str, Any] = {**info, **result, "run_dir": str(cfg.run.out_dir),
                               "processes": trainer.acc.num_processes}
    if not trainer.acc.is_main_process:
        return {}
    if trainer.acc.is_main_process:
        after = evaluate_policy(trainer.policy, trainer.tokenizer, task, problems, cfg, cfg.run.eval_k)
        summary.update(_before_after(before, after))
        write_summary(cfg.run.out_dir, summary)
    return summary


def _before_after(before: dict | None, after: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"eval_after": after, "accuracy_after": after["greedy_accuracy"]}
    if before is not None:
        out.update({"eval_before": before, "accuracy_before": before["greedy_accuracy"],
                    "accuracy_gain": after["greedy_accuracy"] - before["greedy_accuracy"]})
    return out


def evaluate_path(path: str, *, task: str = "arithmetic", problems: int = 200, k: int = 8,
                  max_new_tokens: int = 48, seed: int = 0, strategy: str = "standard",
                  cas: dict[str, Any] | None = None) -> dict[str, Any]:
    """Evaluate a saved model folder, or the latest checkpoint of a run folder. ``strategy='cas'``
    runs CAS with ``cas`` (``rlvr.eval.cas.CASConfig`` fields) against majority voting at equal budget."""
    from rlvr.models import load_model, load_tokenizer
    from rlvr.train.config import load_config, replace
    folder = Path(path)
    if (folder / "config.yaml").exists():  # a run folder: its config says how the model was built
        cfg = load_config(folder / "config.yaml")
        from rlvr.train.checkpoint import latest_checkpoint, load_weights
        model, tokenizer = build_model(cfg)
        ckpt = latest_checkpoint(folder)
        if ckpt is None:
            raise FileNotFoundError(f"run folder {folder} has no checkpoint")
        load_weights(ckpt, model)
    else:
        cfg = load_config(None, [f"task.name={task}"])
        model, tokenizer = load_model(folder), load_tokenizer(folder)
    cfg = replace(cfg, rollout={"max_new_tokens": max_new_tokens})
    task_obj = build_task(cfg)
    if strategy == "cas":
        from rlvr.eval.cas import CASConfig, cas_evaluate
        from rlvr.registry import make_config
        result = cas_evaluate(model, tokenizer, task_obj, heldout(task_obj, problems, seed),
                              make_config(CASConfig, dict(cas or {}), where="eval --strategy cas"),
                              max_new_tokens=max_new_tokens, temperature=cfg.rollout.temperature, seed=seed)
    elif strategy == "standard":
        result = evaluate_policy(model, tokenizer, task_obj, heldout(task_obj, problems, seed), cfg, k)
    else:
        raise ValueError(f"evaluate: unknown strategy '{strategy}'; valid: standard, cas")
    return {"model": str(folder), "problems": problems, **result}
