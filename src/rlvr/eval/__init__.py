"""Evaluation: pass@k (unbiased estimator), maj@k and a held-out evaluation loop."""

from rlvr.eval.evaluation import evaluate
from rlvr.eval.metrics import maj_at_k, majority, pass_at_k

__all__ = ["evaluate", "maj_at_k", "majority", "pass_at_k"]
