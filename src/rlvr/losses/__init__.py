"""Policy losses; importing this package registers them."""

from rlvr.losses.base import PolicyLoss
from rlvr.losses import ppo_clip  # noqa: F401  (registers ppo_clip)
from rlvr.losses import gspo  # noqa: F401  (registers gspo)
from rlvr.losses import dppo  # noqa: F401  (registers dppo_tv, dppo_kl)
from rlvr.losses import cispo  # noqa: F401  (registers cispo)
from rlvr.losses import up  # noqa: F401  (registers up)
from rlvr.losses import ripo  # noqa: F401  (registers ripo)
from rlvr.losses import off_policy  # noqa: F401  (registers oc_grpo, armor)
from rlvr.losses import rollout_is  # noqa: F401  (registers ppo_clip_is)
from rlvr.losses.objective import NonFiniteLossError, Objective, ObjectiveConfig

__all__ = ["NonFiniteLossError", "Objective", "ObjectiveConfig", "PolicyLoss"]
