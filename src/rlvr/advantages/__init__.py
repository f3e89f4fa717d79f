"""Advantage estimators; importing this package registers them."""

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput, outcome_token_rewards, sequence_scores
from rlvr.advantages import grpo  # noqa: F401  (registers grpo, dr_grpo)
from rlvr.advantages import rloo  # noqa: F401  (registers rloo)
from rlvr.advantages import gae  # noqa: F401  (registers gae)
from rlvr.advantages import reinforce_pp  # noqa: F401  (registers reinforce_pp, reinforce_pp_baseline)
from rlvr.advantages import gdpo  # noqa: F401  (registers gdpo)
from rlvr.advantages import sa_mrpo  # noqa: F401  (registers sa_mrpo)
from rlvr.advantages import mmpo  # noqa: F401  (registers mmpo)
from rlvr.advantages import fade  # noqa: F401  (registers fade)
from rlvr.advantages import d_grpo  # noqa: F401  (registers d_grpo)
from rlvr.advantages import cliff  # noqa: F401  (registers cliff)
from rlvr.advantages import la_gae  # noqa: F401  (registers la_gae, BPCO)
from rlvr.advantages import tether  # noqa: F401  (registers tether)
from rlvr.advantages import cvpo  # noqa: F401  (registers cvpo)
from rlvr.advantages import tcpo  # noqa: F401  (registers tcpo)

__all__ = ["AdvantageEstimator", "AdvantageOutput", "outcome_token_rewards", "sequence_scores"]
