"""rlvr: reinforcement learning with verifiable rewards, as composable, tested plug-ins.

The names below load on first use (PEP 562), so ``import rlvr`` (and ``rlvr --help``) does not
import torch."""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "AGGREGATION_MODES": "rlvr.aggregation", "Aggregation": "rlvr.aggregation", "aggregate": "rlvr.aggregation",
    "build": "rlvr.registry", "entries": "rlvr.registry", "get": "rlvr.registry", "names": "rlvr.registry",
    "register": "rlvr.registry",
    "AdvantageInputs": "rlvr.types", "BatchError": "rlvr.types", "LossInputs": "rlvr.types",
    "LossOutput": "rlvr.types", "Problem": "rlvr.types", "Rollouts": "rlvr.types", "Score": "rlvr.types",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlvr' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
