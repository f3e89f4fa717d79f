"""Rewards: verifiers and shapers; importing this package registers them."""

from rlvr.rewards.base import RewardShaper
from rlvr.rewards import overlong  # noqa: F401

__all__ = ["RewardShaper"]
