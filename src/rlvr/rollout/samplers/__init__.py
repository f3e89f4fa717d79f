"""Rollout strategies (kind ``sampler``); importing this package registers them."""

from rlvr.rollout.samplers.base import GenerationCount, SampleContext, Sampler
from rlvr.rollout.samplers import plain  # noqa: F401  (registers plain)
from rlvr.rollout.samplers import prefix  # noqa: F401  (registers prefix)
from rlvr.rollout.samplers import hint  # noqa: F401  (registers hint)
from rlvr.rollout.samplers import anchor  # noqa: F401  (registers anchor)
from rlvr.rollout.samplers import hi_ttrl  # noqa: F401  (registers hi_ttrl)
from rlvr.rollout.samplers import multi_path  # noqa: F401  (registers multi_path)
from rlvr.rollout.samplers import multi_turn  # noqa: F401  (registers multi_turn)

__all__ = ["GenerationCount", "SampleContext", "Sampler"]
