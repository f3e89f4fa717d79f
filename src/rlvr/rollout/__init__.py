"""Rollout engines: sampling completions (with their log-probs) from a policy."""

from rlvr.rollout.hf import ENGINES, Generation, generate

__all__ = ["ENGINES", "Generation", "generate"]
