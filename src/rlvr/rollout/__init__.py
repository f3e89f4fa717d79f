"""Rollout engines: sampling completions (with their log-probs) from a policy, and scoring them."""

from rlvr.rollout.hf import ENGINES, Generation, encode_prompts, generate
from rlvr.rollout.scoring import sequence_logprobs

__all__ = ["ENGINES", "Generation", "encode_prompts", "generate", "sequence_logprobs"]
