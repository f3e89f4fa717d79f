"""The supervised warm start of a run's policy (``warm_start.*``), before RL or as a weak model."""

from __future__ import annotations

from typing import Any, Callable

import torch

from rlvr.train.build import build_model, build_task
from rlvr.train.config import Config, replace


def warm_start_model(cfg: Config, task: Any = None) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """The configured policy, supervised on task demonstrations when ``warm_start.steps > 0``; ``task``:
    the run's task where it is built already (``validate_run``'s), else built here."""
    from rlvr.sft import warm_start
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    torch.manual_seed(cfg.run.seed)
    model, tokenizer = build_model(cfg)
    info: dict[str, Any] = {"warm_start_steps": cfg.warm_start.steps}
    if cfg.warm_start.steps > 0:
        ws, task = cfg.warm_start, task if task is not None else build_task(cfg)
        stop_when = _accuracy_reached(model, tokenizer, task, cfg, info) if ws.target_accuracy > 0 else None
        result = warm_start(model, tokenizer, task, steps=max(ws.max_steps, ws.steps) if stop_when else ws.steps,
                            batch_size=ws.batch_size, lr=ws.lr, warmup=ws.warmup, seed=cfg.run.seed,
                            stop_when=stop_when, min_steps=ws.steps, check_every=ws.check_every,
                            demo_suffix=ws.demo_suffix)
        info.update({f"warm_start_{k}": v for k, v in result.items()})
    return model, tokenizer, info


def _accuracy_reached(model: torch.nn.Module, tokenizer: Any, task: Any, cfg: Config,
                      info: dict[str, Any]) -> Callable[[int], bool]:
    """Stop rule for the warm start: greedy accuracy on 100 validation problems (the task's
    ``validation_problems``: the train split, never the held-out one) has reached
    ``warm_start.target_accuracy``."""
    from rlvr.eval import evaluate
    problems = task.validation_problems(100, seed=10**6 + cfg.run.seed)
    info["warm_start_validation"] = []

    def stop(step: int) -> bool:
        acc = evaluate(model, tokenizer, task, problems, k=0, max_new_tokens=cfg.rollout.max_new_tokens)
        info["warm_start_validation"].append((step, acc["greedy_accuracy"]))
        return acc["greedy_accuracy"] >= cfg.warm_start.target_accuracy
    return stop


def weak_warm_start(cfg: Config, steps: int) -> torch.nn.Module:
    """The run's policy after the first ``steps`` of its own warm start (same initialisation, data
    stream and schedule; no accuracy target): what the trainer hands a sampler's ``prepare``."""
    model, _, _ = warm_start_model(replace(cfg, warm_start={"steps": steps, "target_accuracy": 0.0}))
    return model
