"""Rewards: verifiers and shapers; importing this package registers them."""

from rlvr.rewards.base import RewardShaper
from rlvr.rewards import overlong, verifiers, c3rl  # noqa: F401  (registers the plug-ins)
from rlvr.rewards.answer import extract_answer, parse_confidence, strip_confidence
from rlvr.rewards.c3rl import C3RL, c3rl_reward
from rlvr.rewards.verifiers import ExactVerifier, MathVerifyVerifier, NumericVerifier, Verifier, build_verifier

__all__ = ["C3RL", "ExactVerifier", "MathVerifyVerifier", "NumericVerifier", "RewardShaper", "Verifier",
           "build_verifier", "c3rl_reward", "extract_answer", "parse_confidence", "strip_confidence"]
