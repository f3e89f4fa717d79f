"""Optimizer plug-ins (kind "optimizer"), each a training loop: the gradient trainer (adamw), ES,
GRPO→ES, Hyper-ES, progressive RLVR, LURE.

Importing this package registers them; ``optim.name`` in a run config picks one
(``rlvr.train.run.make_trainer``).
"""

from rlvr.optim.base import OptimizerPlugin
from rlvr.optim.es import (
    ESConfig, ESStepResult, apply_update, es_delta, es_step, param_noise, perturb, restore,
    seed_coefficients, select_parameters, snapshot, z_score,
)
from rlvr.optim.noise import member_seeds, seeded_noise, tensor_seed
from rlvr.optim.es_plugin import ES, GRPOThenES
from rlvr.optim.sequential import SequentialTrainer
from rlvr.optim import hyper_es, progressive  # noqa: E402,F401  (registers hyper_es, progressive_rlvr)
from rlvr.optim import lure  # noqa: E402,F401  (registers lure)
from rlvr.optim.adamw import GRADIENT_TRAINER, AdamW

__all__ = [
    "GRADIENT_TRAINER", "AdamW", "ES", "ESConfig", "ESStepResult", "GRPOThenES", "OptimizerPlugin", "SequentialTrainer", "apply_update",
    "es_delta", "es_step", "member_seeds", "param_noise", "perturb", "restore", "seed_coefficients",
    "seeded_noise", "select_parameters", "snapshot", "tensor_seed", "z_score",
]
