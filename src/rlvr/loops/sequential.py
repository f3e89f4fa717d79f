"""Sequential GRPO → ES (docs/methods.md §2.5, RECONSTRUCTION): gradient steps first, then ES on the result.

Steps 1..S₁ (``grpo_steps``) are ordinary gradient-trainer steps (``algorithm.*``, ``optim.lr``);
steps S₁+1..``run.steps`` are ES iterations from θ_{S₁}. Both phases write to the same run folder
and step numbering; a checkpoint's ``phase`` says which one to resume.
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from rlvr.optim.es import ESConfig
from rlvr.loops.es_trainer import ESTrainer
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.config import Config, replace


class SequentialTrainer:
    """Gradient trainer for ``grpo_steps`` steps, then an ``ESTrainer`` for the rest of ``run.steps``.

    A ``Runnable`` (``rlvr.train.loop``) whose two phases are each run by ``run_loop``."""

    def __init__(self, cfg: Config, es: ESConfig, *, model: torch.nn.Module | None = None,
                 tokenizer: Any = None) -> None:
        from rlvr.train.trainer import Trainer
        if es.grpo_steps >= cfg.run.steps:
            raise ValueError(f"grpo_then_es: grpo_steps={es.grpo_steps} leaves no ES steps in "
                             f"run.steps={cfg.run.steps}")
        self.cfg, self.es = cfg, es
        # The gradient phase sees a budget of grpo_steps (its lr schedule spans that phase only).
        self.gradient = Trainer(replace(cfg, run={"steps": es.grpo_steps}), model=model, tokenizer=tokenizer)
        self.acc, self.tokenizer, self.parts = self.gradient.acc, self.gradient.tokenizer, self.gradient.parts
        self.callbacks = self.gradient.callbacks  # both phases call the same callbacks
        self.es_trainer: ESTrainer | None = None

    @property
    def policy(self) -> torch.nn.Module:
        return self.gradient.policy

    @property
    def step(self) -> int:
        """Steps done over both phases (what ``train_run``'s final evaluation is logged at)."""
        return self.gradient.step if self.es_trainer is None else self.es_trainer.step

    def heldout_metrics(self) -> dict[str, float]:
        return {}

    def export_model(self) -> torch.nn.Module:
        return self.policy

    def evaluates_here(self) -> bool:
        return self.acc.is_main_process

    def lockstep(self) -> AbstractContextManager:
        return nullcontext()

    def train(self, resume: bool = False, eval_fn: Any = None) -> dict[str, Any]:
        ckpt = latest_checkpoint(self.cfg.run.out_dir) if resume else None
        if resume and ckpt is None:
            raise FileNotFoundError(f"no checkpoint to resume from in {self.cfg.run.out_dir}/checkpoints")
        in_es = ckpt is not None and json.loads((ckpt / "state.json").read_text()).get("phase") == "es"
        first: dict[str, Any] = {"steps": self.es.grpo_steps, "rollouts": 0, "seconds": 0.0}
        if not in_es:
            first = self.gradient.train(resume=resume, eval_fn=eval_fn)
            if first["stopped_by"] == "callback":
                return {**first, "grpo_steps": first["steps"]}
        self.es_trainer = ESTrainer(self.cfg, self.es, model=self.policy, tokenizer=self.tokenizer,
                                    accelerator=self.acc, start_step=first["steps"],
                                    start_rollouts=first["rollouts"], start_seconds=first["seconds"])
        self.es_trainer.callbacks = self.callbacks
        # a curriculum carries over between phases
        self.es_trainer.parts = dataclasses.replace(self.es_trainer.parts, selector=self.parts.selector)
        out = self.es_trainer.train(resume=in_es, eval_fn=eval_fn)
        return {**out, "grpo_steps": first["steps"]}
