"""rlvr: reinforcement learning with verifiable rewards, as composable, tested plug-ins."""

from rlvr.aggregation import AGGREGATION_MODES, Aggregation, aggregate
from rlvr.registry import build, entries, get, names, register
from rlvr.types import AdvantageInputs, BatchError, LossInputs, LossOutput, Problem, Rollouts, Score

__version__ = "0.1.0"

__all__ = [
    "AGGREGATION_MODES", "Aggregation", "AdvantageInputs", "BatchError", "LossInputs", "LossOutput",
    "Problem", "Rollouts", "Score", "aggregate", "build", "entries", "get", "names", "register",
]
