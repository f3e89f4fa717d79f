"""The optimizer-plug-in protocol: a training loop that replaces the gradient trainer.

``optim.name: adamw`` keeps the gradient ``Trainer``; any other name builds the plug-in registered
under kind ``"optimizer"`` and asks it for a trainer (``rlvr.train.run.make_trainer``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from rlvr.plugin import Plugin


class OptimizerPlugin(Plugin, ABC):
    """Builds a trainer with the gradient ``Trainer``'s surface: ``train(resume, eval_fn) -> dict``
    (steps, rollouts, seconds, stopped_by), ``policy``, ``tokenizer``, ``parts["task"]`` and ``acc``."""

    @abstractmethod
    def trainer(self, cfg: Any, *, model: torch.nn.Module | None = None, tokenizer: Any = None) -> Any:
        """The training loop for run config ``cfg`` (the policy is built from ``cfg`` when not given)."""
