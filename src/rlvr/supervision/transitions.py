"""DE-Venus offline transitions ``D → D′`` (docs/methods.md §2.2): score problems from the supervision state,
annotate the best under a label budget, keep the best under a data budget.

RECONSTRUCTION (the abstract gives no equations): the scores, the top-k rule and the budget
counts below are the team's reading. Budgets are fractions of the pool D: at most
``⌊label_budget·|D|⌋`` problems ever carry a gold label, at most ``⌊data_budget·|D|⌋`` are trained on.
"""

from __future__ import annotations

import math
import random
from typing import Sequence

from rlvr.supervision.state import SupervisionState
from rlvr.types import Problem

SCORES = ("random", "uncertainty", "difficulty", "low_confidence")


def score(state: SupervisionState, uid: str, kind: str) -> float:
    """How much a problem is worth choosing, in [0, 1] (higher first).

    * ``uncertainty``: Beta posterior variance of the success rate, ×12 (1 for an unseen problem);
    * ``difficulty``: ``p̂(1 − p̂)`` ×4 at the posterior mean p̂ (GRPO's signal power, §2.30);
    * ``low_confidence``: ``1 − confidence`` of the label in use (1 for an unlabelled, unseen problem);
    * ``random``: 1 (ties broken by the seeded draw).
    """
    if kind == "random":
        return 1.0
    if kind == "low_confidence":
        return 1.0 - state.records[uid].confidence if uid in state else 1.0
    mean, var = state.success_rate(uid)
    if kind == "uncertainty":
        return 12.0 * var
    if kind == "difficulty":
        return 4.0 * mean * (1.0 - mean)
    raise ValueError(f"supervision: score must be one of {SCORES}, got '{kind}'")


def ranked(state: SupervisionState, problems: Sequence[Problem], kind: str, rng: random.Random) -> list[int]:
    """Indices of ``problems`` best first by ``score``; ties in a seeded random order."""
    tie = [rng.random() for _ in problems]
    return sorted(range(len(problems)), key=lambda i: (-score(state, problems[i].uid, kind), tie[i]))


def budget_count(fraction: float, pool_size: int) -> int:
    """``⌊fraction·|D|⌋`` (a tiny epsilon keeps 0.1·30 = 3, not 2, under float rounding)."""
    return int(math.floor(fraction * pool_size + 1e-9))


def choose_training(state: SupervisionState, pool: Sequence[Problem], data_budget: float, kind: str,
                    rng: random.Random) -> list[int]:
    """D′: the indices (in pool order) of the best ``⌊data_budget·|D|⌋`` problems (at least one)."""
    k = max(1, budget_count(data_budget, len(pool)))
    return sorted(ranked(state, pool, kind, rng)[:k])


def annotate(state: SupervisionState, candidates: Sequence[Problem], k: int, kind: str,
             rng: random.Random) -> list[str]:
    """Give gold labels to the best ``k`` candidates that have one and are not labelled yet."""
    open_ = [p for p in candidates if p.answer is not None and state.get(p.uid).source not in ("gold", "corrected")]
    chosen = [open_[i] for i in ranked(state, open_, kind, rng)[:max(k, 0)]]
    for p in chosen:
        state.set_label(p.uid, str(p.answer), "gold", 1.0)
    return [p.uid for p in chosen]


def weighted_draw(weights: Sequence[float], n: int, rng: random.Random) -> list[int]:
    """``n`` indices drawn ∝ weight without replacement (Efraimidis–Spirakis keys u^(1/w)); when
    ``n`` exceeds the population the draw repeats on a fresh pass."""
    out: list[int] = []
    while len(out) < n:
        keys = [rng.random() ** (1.0 / w) if w > 0 else -1.0 for w in weights]
        order = sorted(range(len(weights)), key=lambda i: -keys[i])
        out += order[: n - len(out)]
    return out
