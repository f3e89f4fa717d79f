"""The torch-optimizer protocol: the gradient steps' optimizer is a registered ``optimizer`` plug-in.

``optim.optimizer`` names one (``adamw``, the default); the gradient trainer builds it over the
trainable parameters with the ``optim`` section's ``lr``, ``betas`` and ``weight_decay``
(``rlvr.train.build.build_optimizer``). Adding one (Lion, Muon) is one file that registers a subclass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Iterable

import torch

from rlvr.plugin import Plugin


class TorchOptimizer(Plugin, ABC):
    """Makes the ``torch.optim.Optimizer`` of the gradient steps; its own knobs, if any, are its ``Config``
    (``optim.optimizer_params``)."""

    @abstractmethod
    def make(self, params: Iterable[torch.nn.Parameter], *, lr: float, betas: tuple[float, float],
             weight_decay: float) -> torch.optim.Optimizer:
        """The optimizer over ``params`` (the trainable parameters, in their own dtype)."""
