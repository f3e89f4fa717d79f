"""Rewards: verifiers and shapers; importing this package registers them."""

from rlvr.rewards.base import RewardShaper
from rlvr.rewards import overlong, verifiers, c3rl  # noqa: F401  (registers the plug-ins)
from rlvr.rewards import code  # noqa: F401  (registers the sandboxed code verifier)
from rlvr.rewards import gar, shapley  # noqa: F401  (registers gar, parallel_shapley)
from rlvr.rewards import consensus, ttrl, om_grpo  # noqa: F401  (label-free shapers)
from rlvr.rewards import de_venus  # noqa: F401  (DE-Venus weak supervision)
from rlvr.rewards import flip  # noqa: F401  (reward_flip, the positive controls' harm)
from rlvr.rewards.answer import extract_answer, parse_confidence, strip_confidence
from rlvr.rewards.c3rl import C3RL, c3rl_reward
from rlvr.rewards.om_grpo import OMGRPO, soft_consensus
from rlvr.rewards.ttrl import TTRL, ttrl_rewards
from rlvr.rewards.verifiers import ExactVerifier, MathVerifyVerifier, NumericVerifier, Verifier, build_verifier

__all__ = ["C3RL", "ExactVerifier", "MathVerifyVerifier", "NumericVerifier", "OMGRPO", "RewardShaper", "TTRL",
           "Verifier", "build_verifier", "c3rl_reward", "extract_answer", "parse_confidence", "soft_consensus",
           "strip_confidence", "ttrl_rewards"]
