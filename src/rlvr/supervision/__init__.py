"""Supervision as evolving state (DE-Venus): labels, their sources and trust, and the transitions
that change them."""

from rlvr.supervision.pool import problem_pool
from rlvr.supervision.state import SOURCES, Record, SupervisionState
from rlvr.supervision.transitions import annotate, budget_count, choose_training, score, weighted_draw

__all__ = ["SOURCES", "Record", "SupervisionState", "annotate", "budget_count", "choose_training",
           "problem_pool", "score", "weighted_draw"]
