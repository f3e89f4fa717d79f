"""The gradient trainer as a loop plug-in: ``optim.name: gradient`` (the default; ``adamw``, its name
before the loops had a kind of their own, still reads as it, rlvr.train.config_schema.OptimConfig)."""

from __future__ import annotations

from typing import Any

import torch

from rlvr.plugin import NoConfig
from rlvr.registry import register
from rlvr.train.loop_plugin import LoopPlugin
from rlvr.train.pipeline import Pipeline
from rlvr.train.trainer import Trainer

GRADIENT_TRAINER = "gradient"  # its registered name, for the loops that run gradient steps inside their own


@register("loop", GRADIENT_TRAINER)
class Gradient(LoopPlugin):
    """The gradient RL trainer: sample, verify, advantages, policy loss, optimizer steps (rlvr.train.trainer).

    Its hyperparameters are the ``optim`` section itself (``optimizer``, ``lr``, ``betas``,
    ``weight_decay``, ``grad_clip``, ``schedule``, ``warmup_steps``, ``ppo_epochs``, ``mini_batches``,
    ...), so ``optim.params`` stays empty; ``optim.optimizer`` names the torch optimizer (``adamw``,
    rlvr.optim). It is the one loop that trains a LoRA policy (``model.lora``), reads the gradient
    knobs (mixed precision, mini-batches, behaviour log-probs, gradient checkpointing) and builds every
    RL plug-in the config names (sampler, verifier, advantage, loss, shapers, filters, weightings,
    selector).
    """

    Config = NoConfig
    takes_lora = True
    gradient_knobs = True
    builds_pipeline = True

    def trainer(self, cfg: Any, *, model: torch.nn.Module | None = None, tokenizer: Any = None,
                parts: Pipeline | None = None) -> Any:
        return Trainer(cfg, model=model, tokenizer=tokenizer, parts=parts)
