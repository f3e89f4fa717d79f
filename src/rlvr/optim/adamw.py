"""AdamW (Loshchilov & Hutter, arXiv:1711.05101), the default torch optimizer: ``optim.optimizer: adamw``."""

from __future__ import annotations

from typing import Iterable

import torch

from rlvr.optim.base import TorchOptimizer
from rlvr.plugin import NoConfig
from rlvr.registry import register


@register("optimizer", "adamw")
class AdamW(TorchOptimizer):
    """AdamW: Adam with decoupled weight decay (torch.optim.AdamW)."""

    Config = NoConfig
    paper = "Decoupled Weight Decay Regularization (arXiv:1711.05101)"

    def make(self, params: Iterable[torch.nn.Parameter], *, lr: float, betas: tuple[float, float],
             weight_decay: float) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)
