"""The layers of rlvr, declared once: a module imports only from its own layer or from lower ones.

``LAYERS`` gives each folder or top-level module below ``rlvr`` its layer (``""`` is the package root),
never a dotted name: a folder is one layer, and a module's layer is its folder's; every top-level name
needs one. ``LAYER_NAMES`` says what each layer is. docs/design.md §5 is generated from both
(``python -m rlvr.layout``), each folder described by its own docstring.

Built-in plug-ins are found by name (``rlvr.registry``), never imported by the layers under them; a
layer that needs something of a higher one is handed it (a callable, a Protocol, a ContextVar:
``rlvr.rollout.lockstep``, ``rlvr.rollout.warm_start``). ``tests/unit/test_layers.py`` checks every import
statement of ``src/rlvr`` against this table and fails on any cycle between modules.
"""

from __future__ import annotations

LAYERS: dict[str, int] = {
    # 0 foundation
    "types": 0, "notice": 0, "registry": 0, "plugin": 0, "ops": 0, "batching": 0, "supervision": 0,
    "lr_schedule": 0, "layers": 0, "packing": 0, "collectives": 0, "files": 0, "sandbox": 0,
    # 1 math plug-ins
    "": 1, "advantages": 1, "aggregation": 1, "losses": 1, "filters": 1, "weighting": 1, "selection": 1,
    "optim": 1,
    # 2 problems
    "tasks": 2, "rewards": 2, "models": 2,
    # 3 episodes
    "sft": 3, "envs": 3,
    # 4 generation
    "rollout": 4, "critic": 4, "eval": 4, "analysis": 4,
    # 5 training
    "train": 5, "presets": 5,
    # 6 own loops
    "loops": 6,
    # 7 front ends
    "compare": 7, "plots": 7, "quickstart": 7, "integrations": 7, "cli": 7, "__main__": 7, "catalogue": 7,
    "listing": 7, "layout": 7,
}


LAYER_NAMES: dict[int, str] = {
    0: "foundation", 1: "math plug-ins", 2: "problems", 3: "episodes", 4: "generation", 5: "training",
    6: "own loops", 7: "front ends",
}


def layer_of(module: str) -> int:
    """The layer of ``module`` (a dotted name such as ``rlvr.optim.es``): its folder's (or its own, for a
    top-level module)."""
    parts = module.split(".")[1:]  # below "rlvr"
    key = parts[0] if parts else ""
    if key not in LAYERS:
        raise KeyError(f"{module}: no layer declared in rlvr.layers.LAYERS")
    return LAYERS[key]
