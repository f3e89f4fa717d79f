"""The training loops' math and the torch optimizers: ES, merging, TinyLoRA, quantisation; AdamW.

ES (``es``, ``noise``), model merging (``merging``), TinyLoRA (``tinylora``) and quantisation
(``quantize``) are what ``rlvr.loops`` runs; the torch optimizers of the gradient steps are kind
"optimizer" (``adamw``; ``base`` is their protocol). Nothing here imports a loop or the trainer.
"""

from rlvr.optim.base import TorchOptimizer
from rlvr.optim.es import (
    ESConfig, ESStepResult, apply_update, es_delta, es_step, param_noise, perturb, restore,
    seed_coefficients, select_parameters, snapshot, z_score,
)
from rlvr.optim.noise import member_seeds, seeded_noise, tensor_seed
from rlvr.optim.adamw import AdamW  # noqa: F401  (registers adamw)

__all__ = [
    "AdamW", "ESConfig", "ESStepResult", "TorchOptimizer", "apply_update", "es_delta", "es_step", "member_seeds",
    "param_noise", "perturb", "restore", "seed_coefficients", "seeded_noise", "select_parameters", "snapshot",
    "tensor_seed", "z_score",
]
