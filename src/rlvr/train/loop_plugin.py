"""The loop-plug-in protocol: every training loop is a registered ``loop`` plug-in (``src/rlvr/loops/``).

``optim.name`` names one (``gradient``, the gradient trainer, by default; ``es``, ``hyper_es``, ...).
The run asks the registered class, never the name, what the loop takes: a LoRA policy
(``takes_lora``), the gradient trainer's knobs (``gradient_knobs``), the whole RL pipeline of the
config (``builds_pipeline``); ``trainer(cfg, ...)`` builds the loop (``rlvr.train.run.make_trainer``).
The protocol sits here, beside the ``Runnable`` it builds (``rlvr.train.loop``), so that the run
reads it without importing the loops above it (``rlvr.layers``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from rlvr.plugin import Plugin
from rlvr.registry import RegistryError, get


class LoopPlugin(Plugin, ABC):
    """Builds a training loop of the ``Runnable`` protocol (``rlvr.train.loop``, docs/design.md §11):
    ``train(resume, eval_fn) -> dict`` (steps, rollouts, seconds, stopped_by), ``policy``,
    ``tokenizer``, ``parts.task``, ``acc``, ``callbacks``, ``step`` and four small methods; a loop
    that ``run_loop`` drives step by step is a ``TrainingLoop``.

    The class attributes say what the loop takes; a loop of its own on the full weights (the
    default) takes none of them."""

    takes_lora: ClassVar[bool] = False  # trains a LoRA policy (model.lora)
    # reads the gradient trainer's knobs: run.mixed_precision, optim.mini_batches, optim.old_logprobs,
    # model.gradient_checkpointing (rlvr.train.precision.check_supported refuses them otherwise)
    gradient_knobs: ClassVar[bool] = False
    # builds every RL plug-in of the config; else task + selector. Its ``trainer`` then also takes
    # ``parts=`` (``build_pipeline``'s ``Pipeline``, as validation built it) and reuses them
    builds_pipeline: ClassVar[bool] = False

    @abstractmethod
    def trainer(self, cfg: Any, *, model: torch.nn.Module | None = None, tokenizer: Any = None) -> Any:
        """The training loop for run config ``cfg`` (the policy is built from ``cfg`` when not given)."""


def loop_class(name: str) -> type[LoopPlugin]:
    """The loop plug-in class registered as ``name`` (or imported from ``"pkg.module:Object"``);
    an unknown name is an error listing the valid ones, a class of another protocol one naming it."""
    cls = get("loop", name)
    if not (isinstance(cls, type) and issubclass(cls, LoopPlugin)):
        raise RegistryError(f"loop '{name}': {cls!r} is not a LoopPlugin (rlvr.train.loop_plugin)")
    return cls
