"""Evaluation: pass@k (unbiased estimator), maj@k, calibration metrics and CAS (adaptive test-time scaling)."""

from rlvr.eval.calibration import brier_score, calibration_metrics, expected_calibration_error
from rlvr.eval.cas import CASConfig, Sample, cas_evaluate, run_cas, weighted_vote
from rlvr.eval.evaluation import evaluate
from rlvr.eval.metrics import maj_at_k, majority, pass_at_k

__all__ = ["CASConfig", "Sample", "brier_score", "calibration_metrics", "cas_evaluate", "evaluate",
           "expected_calibration_error", "maj_at_k", "majority", "pass_at_k", "run_cas", "weighted_vote"]
