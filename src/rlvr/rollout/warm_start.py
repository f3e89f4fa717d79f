"""The run's supervised warm start, handed down to samplers that build a weak model from it.

``train/`` sits above ``rollout/`` (``rlvr.layers``), so a sampler cannot import it: the trainer
opens ``warm_start_by(fn)`` around ``Sampler.prepare`` (as it opens ``lockstep`` around
generation) and ``warm_started(cfg, steps)`` calls ``fn``: the run's policy after the first
``steps`` of its own warm start.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable

import torch

WarmStart = Callable[[Any, int], torch.nn.Module]  # (run config, steps) -> the warm-started policy

_WARM_START: ContextVar[WarmStart | None] = ContextVar("rlvr_warm_start", default=None)


@contextmanager
def warm_start_by(fn: WarmStart) -> Iterator[None]:
    """Inside, ``warm_started`` builds its models with ``fn``."""
    token = _WARM_START.set(fn)
    try:
        yield
    finally:
        _WARM_START.reset(token)


def warm_started(cfg: Any, steps: int) -> torch.nn.Module:
    """The run's policy after ``steps`` warm-start steps, built by the ``fn`` of ``warm_start_by``."""
    fn = _WARM_START.get()
    if fn is None:
        raise RuntimeError("no warm start handed down: call Sampler.prepare inside "
                           "rlvr.rollout.warm_start.warm_start_by (the trainer does)")
    return fn(cfg, steps)
