"""The layers of rlvr, declared once: a module imports only from its own layer or from lower ones.

====  ==============  ====================================================================
 0    foundation      types, notice, registry, plugin, ops, batching, packing, supervision, lr_schedule,
                      collectives, files
 1    math plug-ins   advantages, aggregation, losses, filters, weighting, selection, optim (the
                      loops' math: ES, noise, merging, quantisation, TinyLoRA; the torch
                      optimizers); the package root (it re-exports aggregation, registry and types)
 2    problems        tasks, rewards, models
 3    episodes        sft (the supervised warm start), envs (multi-turn environments)
 4    generation      rollout, critic, eval, analysis
 5    training        train, presets
 6    own loops       loops (the gradient trainer's plug-in, ES, GRPO→ES, Hyper-ES, Progressive
                      RLVR, LURE; the report of ``rlvr bound``, which loads a trained run)
 7    front ends      compare, plots, quickstart, integrations, catalogue, listing, cli, __main__
====  ==============  ====================================================================

A key is a folder or a top-level module below ``rlvr`` (``""`` is the package root), never a dotted
name: a folder is one layer, and a module's layer is its folder's; every top-level name needs one.
Built-in plug-ins are found by name (``rlvr.registry``), never imported by the layers under them; a
layer that needs something of a higher one is handed it (a callable, a Protocol, a ContextVar:
``rlvr.rollout.lockstep``, ``rlvr.rollout.warm_start``). ``tests/unit/test_layers.py`` checks every import
statement of ``src/rlvr`` against this table and fails on any cycle between modules.
"""

from __future__ import annotations

LAYERS: dict[str, int] = {
    # 0 foundation
    "types": 0, "notice": 0, "registry": 0, "plugin": 0, "ops": 0, "batching": 0, "supervision": 0,
    "lr_schedule": 0, "layers": 0, "packing": 0, "collectives": 0, "files": 0,
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
    "listing": 7,
}


def layer_of(module: str) -> int:
    """The layer of ``module`` (a dotted name such as ``rlvr.optim.es``): its folder's (or its own, for a
    top-level module)."""
    parts = module.split(".")[1:]  # below "rlvr"
    key = parts[0] if parts else ""
    if key not in LAYERS:
        raise KeyError(f"{module}: no layer declared in rlvr.layers.LAYERS")
    return LAYERS[key]
