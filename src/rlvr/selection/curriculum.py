"""Curriculum selection by estimated prompt difficulty (CVPO's question-level weighting)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlvr.registry import param, register
from rlvr.selection.base import Selector
from rlvr.types import Problem


@dataclass(frozen=True)
class CurriculumConfig:
    ema_decay: float | None = param(None, "decay d of each question's success estimate p_q ← d·p_q + (1 − d)·r̄_q "
                                          "(required: METHODS §2.14 lists no default)")
    p_star: float = param(0.5, "success rate p* the weight peaks at")
    tau: float = param(0.25, "width τ of the Gaussian weight exp(−(p_q − p*)²/(2τ²))")
    prior: float = param(0.5, "p_q of a question never seen before")
    pool_factor: int = param(4, "candidates drawn from the task per selected problem (the pool the weights pick from)")

    def __post_init__(self) -> None:
        if self.ema_decay is None or not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"curriculum: ema_decay is required, in [0, 1); got {self.ema_decay}")
        if self.tau <= 0 or self.pool_factor < 1:
            raise ValueError(f"curriculum: tau must be > 0 and pool_factor >= 1, got {self.tau}, {self.pool_factor}")


def curriculum_weights(p: Tensor, p_star: float, tau: float) -> Tensor:
    """(Q,) ``ω_q = exp(−(p_q − p*)²/(2τ²))`` normalised to mean 1 over the given questions."""
    w = torch.exp(-((p - p_star) ** 2) / (2.0 * tau**2))
    return w / w.mean()


@register("selector", "curriculum")
class Curriculum(Selector):
    """Pick problems whose estimated success rate is near p*, from a larger pool of fresh candidates.

    Paper: "CVPO: Curriculum-guided Value-variance Policy Optimization" (arXiv id unknown; seed
    abstract, METHODS §2.14). RECONSTRUCTION: the Gaussian weight, the EMA success estimate, and
    applying the weight by sampling (a selector) rather than by scaling each question's loss — the
    two agree in expectation: a question drawn with probability ∝ ω_q contributes ∝ ω_q.

    Equation: after each step, ``p_q ← d·p_q + (1 − d)·mean_i r_{q,i}`` for every question q seen;
    to select n problems, draw ``pool_factor·n`` candidates from the task and sample n of them
    without replacement with probability ∝ ``ω_q = exp(−(p_q − p*)²/(2τ²))`` (unseen: p_q = prior).

    Differs from uniform: keeps per-question success estimates (saved in checkpoints) and prefers
    questions of matched difficulty. Data-parallel runs observe each rank's own rows only.

    Shapes: → list of n problems; observe reads rewards (N, K) and the rows' problems.
    """

    Config = CurriculumConfig
    paper = "CVPO: Curriculum-guided Value-variance Policy Optimization (arXiv id unknown; seed abstract)"

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.success: dict[str, float] = {}  # uid → EMA success estimate p_q

    def select(self, task: Any, n: int, step: int, seed: int) -> list[Problem]:
        cfg = self.config
        pool = task.problems(n * cfg.pool_factor, seed=seed)
        p = torch.tensor([self.success.get(q.uid, cfg.prior) for q in pool], dtype=torch.float64)
        weights = curriculum_weights(p, cfg.p_star, cfg.tau).tolist()
        rng = random.Random(seed)
        keys = [rng.random() ** (1.0 / w) if w > 0 else 0.0 for w in weights]  # weighted draw w/o replacement
        chosen = sorted(range(len(pool)), key=lambda i: -keys[i])[:n]
        return [pool[i] for i in sorted(chosen)]

    def observe(self, feedback: dict[str, Any]) -> None:
        rewards = feedback["rewards"][:, 0].tolist()
        totals: dict[str, list[float]] = {}
        for problem, r in zip(feedback["problems"], rewards):
            totals.setdefault(problem.uid, []).append(float(r))
        d = self.config.ema_decay
        for uid, rs in totals.items():
            prev = self.success.get(uid, self.config.prior)
            self.success[uid] = d * prev + (1.0 - d) * sum(rs) / len(rs)

    def weights(self, problems: list[Problem]) -> Tensor:
        """(Q,) the current curriculum weights of ``problems`` (mean 1), for loss-weighting callers."""
        p = torch.tensor([self.success.get(q.uid, self.config.prior) for q in problems], dtype=torch.float32)
        return curriculum_weights(p, self.config.p_star, self.config.tau)

    def state_dict(self) -> dict[str, Any]:
        return {"success": dict(self.success)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.success = {str(k): float(v) for k, v in state["success"].items()}
