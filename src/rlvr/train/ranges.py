"""Numeric ranges of the config values, checked when a ``Config`` is built: one line naming the key."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

# "section.key": (predicate, wording); anything not listed only has to be finite when it is a float.
_NON_NEGATIVE = ("run.max_rollouts", "run.max_seconds", "run.eval_every", "run.save_every", "run.log_samples",
                 "run.threads", "warm_start.steps", "warm_start.max_steps", "warm_start.warmup",
                 "rollout.top_k", "rollout.refill_rounds", "rollout.batch_size", "optim.weight_decay",
                 "optim.grad_clip", "optim.warmup_steps", "optim.micro_batch_size", "algorithm.kl_coef",
                 "critic.weight_decay", "critic.grad_clip", "critic.lr_warmup_steps", "critic.warmup_steps",
                 "critic.micro_batch_size", "critic.value_clip", "rollout.micro_batch_size", "run.table_every",
                 "optim.lr", "run.eval_k")
_AT_LEAST_ONE = ("run.steps", "run.eval_problems", "rollout.max_new_tokens", "optim.ppo_epochs",
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
