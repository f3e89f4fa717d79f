"""The finite problem pool D that pool-based selectors (DE-Venus active selection, KGPS) work on."""

from __future__ import annotations

from typing import Any

from rlvr.types import Problem


def problem_pool(task: Any, size: int, seed: int) -> list[Problem]:
    """``size`` distinct training problems from the task's stream ``seed``; ``size = 0`` takes every
    training row of a finite task (one with ``rows(split)``, e.g. the dataset task). Uids are unique."""
    if size == 0:
        if not hasattr(task, "rows"):
            raise ValueError(f"pool_size=0 needs a finite task with rows(); task '{getattr(task, 'name', task)}' "
                             f"generates problems, so set pool_size > 0")
        problems = list(task.rows("train"))
    else:
        problems = task.problems(size, seed=seed)
    out, seen = [], set()
    for p in problems:
        if p.uid not in seen:  # a dataset may repeat a prompt; one record per uid
            seen.add(p.uid)
            out.append(p)
    if not out:
        raise ValueError("problem pool: the task gave no training problems")
    return out
