"""Advantage estimators; importing this package registers them."""

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput, sequence_scores
from rlvr.advantages import grpo  # noqa: F401  (registers grpo, dr_grpo)

__all__ = ["AdvantageEstimator", "AdvantageOutput", "sequence_scores"]
