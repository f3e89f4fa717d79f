"""LURE's held-out measure (docs/methods.md §2.7): how often the pursuer captures tasks nobody trained on.

A LURE run has no dataset, so the task evaluation of ``rlvr train`` (single-turn answers) says
nothing about the pursuer. This plays ``samples`` episodes of the planner–executor pursuit on a fixed
set of tasks per environment, ``tasks_per_level`` at every level of its difficulty axis (uniform, not
what the evader chose), drawn from a seed stream of their own (``lure-heldout:…``; training draws
``lure:…``). Sampling follows the run's rollout settings with a fixed seed, so two policies are
compared on the same tasks and the same random stream.

Returns (keys under ``heldout/``, which ``rlvr compare`` pairs like the task's own metrics):
``heldout/capture`` — mean capture over all episodes; ``heldout/solved`` — tasks captured in at least
one of their ``samples`` episodes; ``heldout/progress`` — mean best verifier progress; and
``heldout/capture/<env>`` per environment.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from rlvr.envs.base import EPISODE_KEY
from rlvr.envs.lure import LureEnvironment
from rlvr.rollout.samplers import SampleContext
from rlvr.types import Problem

HELDOUT_SEED = 7_777_777  # the sampling seed of every held-out pursuit (the same for every policy)


def heldout_tasks(env: LureEnvironment, tasks_per_level: int, seed: int) -> list[Problem]:
    """``tasks_per_level`` tasks at each level 1..levels, from the held-out seed stream."""
    name, out = env.registered_name, []
    for level in range(1, env.config.levels + 1):
        for j in range(tasks_per_level):
            task = env.task_at(level, random.Random(f"lure-heldout:{seed}:{name}:{level}:{j}"))
            task.uid = f"lure-heldout:{name}:{level}:{j}"
            out.append(task)
    return out


@torch.no_grad()
def pursuit_heldout(model: torch.nn.Module, tokenizer: Any, envs: dict[str, LureEnvironment],
                    pursuers: dict[str, Any], rollout: Any, *, tasks_per_level: int, samples: int,
                    seed: int) -> dict[str, float]:
    """The ``heldout/…`` capture metrics of ``model`` (see the module docstring)."""
    was_training = model.training
    model.eval()
    captured: list[float] = []
    solved: list[float] = []
    progress: list[float] = []
    out: dict[str, float] = {}
    for k, (name, env) in enumerate(envs.items()):
        tasks = heldout_tasks(env, tasks_per_level, seed)
        ctx = SampleContext(tokenizer=tokenizer, rollout=rollout, seed=HELDOUT_SEED + k)
        batch = pursuers[name].sample(model, tasks, samples, ctx)  # (len(tasks) * samples) episodes
        episodes = [p.meta[EPISODE_KEY] for p in batch.problems]  # each row's own record
        caught = [float(ep["info"]["captured"]) for ep in episodes]
        out[f"heldout/capture/{name}"] = sum(caught) / len(caught)
        captured += caught
        groups: dict[int, list[float]] = {}
        for g, c in zip(batch.group_ids.tolist(), caught):
            groups.setdefault(g, []).append(c)
        solved += [float(any(cs)) for cs in groups.values()]
        progress += [max(ep["scores"]) if ep["scores"] else 0.0 for ep in episodes]
    model.train(was_training)
    out.update({"heldout/capture": sum(captured) / len(captured), "heldout/solved": sum(solved) / len(solved),
                "heldout/progress": sum(progress) / len(progress)})
    return out
