"""Checks made before any work: numeric ranges of every config value (when a ``Config`` is built),
plug-ins and their parameters, the output folder's writability (``validate_run``, before the warm
start), and prompt lengths against the model's context (``fit_prompts``)."""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

# "section.key": (predicate, wording); anything not listed only has to be finite when it is a float.
_NON_NEGATIVE = ("run.max_rollouts", "run.max_seconds", "run.eval_every", "run.save_every", "run.log_samples",
                 "run.threads", "warm_start.steps", "warm_start.max_steps", "warm_start.warmup",
                 "rollout.top_k", "rollout.refill_rounds", "rollout.batch_size", "optim.weight_decay",
                 "optim.grad_clip", "optim.warmup_steps", "optim.micro_batch_size", "algorithm.kl_coef",
                 "critic.weight_decay", "critic.grad_clip", "critic.lr_warmup_steps", "critic.warmup_steps",
                 "critic.micro_batch_size", "critic.value_clip", "rollout.micro_batch_size", "run.table_every",
                 "optim.lr")
_AT_LEAST_ONE = ("run.steps", "run.eval_problems", "run.eval_k", "rollout.max_new_tokens", "optim.ppo_epochs",
                 "warm_start.batch_size", "warm_start.check_every", "critic.epochs", "model.hidden",
                 "model.layers", "model.heads")
_POSITIVE = ("warm_start.lr", "rollout.temperature", "rollout.verify_timeout_s", "critic.lr",
             "rollout.repetition_penalty")
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    **{key: (lambda v: v >= 0, ">= 0") for key in _NON_NEGATIVE},
    **{key: (lambda v: v >= 1, ">= 1") for key in _AT_LEAST_ONE},
    **{key: (lambda v: v > 0, "> 0") for key in _POSITIVE},
    "rollout.top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "rollout.min_p": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "warm_start.target_accuracy": (lambda v: 0 <= v <= 1, "in [0, 1]"),
}


def check_ranges(cfg: Any) -> None:
    """Raise ``ValueError`` naming the first config value out of its range (or a non-finite float)."""
    for section in dataclasses.fields(cfg):
        part = getattr(cfg, section.name)
        if not dataclasses.is_dataclass(part):
            continue
        for field in dataclasses.fields(part):
            key, value = f"{section.name}.{field.name}", getattr(part, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{key} must be a finite number, got {value}")
            rule = _RULES.get(key)
            if rule is not None and isinstance(value, (int, float)) and not rule[0](value):
                raise ValueError(f"{key} must be {rule[1]}, got {value}")


def validate_run(cfg: Any, writes: bool = True) -> None:
    """Everything about a run that can fail without training: every plug-in built with its parameters
    (the task probed, so a bad dataset fails here) and, on the process that ``writes`` it (rank 0), the
    run folder writable (other ranks, e.g. on other nodes, create nothing there)."""
    from rlvr.train.build import build_pipeline, build_plugin, build_task
    from rlvr.train.config import PluginSpec
    if cfg.optim.name == "adamw":
        build_pipeline(cfg)
    else:  # an optimizer plug-in brings its own loop; it reads the task and the selector
        build_plugin("optimizer", PluginSpec(cfg.optim.name, cfg.optim.params))
        build_task(cfg)
        build_plugin("selector", cfg.algorithm.selector)
    if writes:
        check_writable(Path(cfg.run.out_dir))


def check_writable(folder: Path) -> None:
    """Create ``folder`` if needed and write a probe file there; any OS error is one line."""
    from rlvr.train.config import ConfigError
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write_test_", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ConfigError(f"run.out_dir {folder} is not writable: {err.strerror or err}") from None


def fit_prompts(task: Any, tokenizer: Any, context: int | None, max_new_tokens: int) -> None:
    """Reject (or, with the task's ``on_bad_row: skip``, drop and count) dataset prompts whose tokens
    after the chat template plus ``max_new_tokens`` exceed the model's ``context``. Tasks that
    generate their problems (no ``drop_rows``) are left alone."""
    if context is None or not hasattr(task, "drop_rows"):
        return
    from rlvr.models.loading import render_prompt
    limit = context - max_new_tokens
    too_long = []
    for split in ("train", "test"):
        rows = task.rows(split)
        lengths = _token_counts(tokenizer, [render_prompt(tokenizer, p) for p in rows])
        too_long += [(split, p, n) for p, n in zip(rows, lengths) if n > limit]
    if too_long:
        split, first, n = too_long[0]
        task.drop_rows({p.uid for _, p, _ in too_long},
                       f"{len(too_long)} prompt(s) longer than the model's context allows ({context} tokens, "
                       f"{max_new_tokens} of them for the completion); the first, {split} row "
                       f"{first.meta.get('row', 0) + 1}, has {n} tokens")


def context_length(model: Any) -> int | None:
    """The longest sequence ``model`` takes (its config's position limit), or None when it names none."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _token_counts(tokenizer: Any, texts: list[str], batch: int = 256) -> list[int]:
    out: list[int] = []
    for i in range(0, len(texts), batch):
        out += [len(ids) for ids in tokenizer(texts[i: i + batch])["input_ids"]]
    return out
