"""Rollout engines: sampling completions (with their log-probs) from a policy, and scoring them."""

from rlvr.rollout.hf import Generation, encode_prompts, generate, generate_ids
from rlvr.rollout.scoring import sequence_logprobs

__all__ = ["Generation", "encode_prompts", "generate", "generate_ids", "sequence_logprobs"]
from rlvr.rollout import samplers  # noqa: E402,F401  (registers the samplers)
