"""Training loops (kind "loop"): the gradient trainer, ES, GRPO→ES, Hyper-ES, Progressive RLVR, LURE.

Each is a registered plug-in that ``optim.name`` picks (``gradient``, the default).

Importing this package registers them (``rlvr.train.run.make_trainer`` builds the one named); their
protocol is ``rlvr.train.loop_plugin.LoopPlugin``, the math they run ``rlvr.optim``.
"""

from rlvr.loops.es_plugin import ES, GRPOThenES
from rlvr.loops.sequential import SequentialTrainer
from rlvr.loops import hyper_es, progressive  # noqa: E402,F401  (registers hyper_es, progressive_rlvr)
from rlvr.loops import lure  # noqa: E402,F401  (registers lure)
from rlvr.loops.gradient import GRADIENT_TRAINER, Gradient

__all__ = ["ES", "GRADIENT_TRAINER", "GRPOThenES", "Gradient", "SequentialTrainer"]
