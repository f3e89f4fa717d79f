"""Curriculum by estimated prompt difficulty (CVPO's question-level weighting, docs/methods.md §2.14)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlvr.registry import param, register
from rlvr.selection.base import Selector
from rlvr.supervision import problem_pool
from rlvr.types import Problem

APPLY = ("loss", "sampling")


@dataclass(frozen=True)
class CurriculumConfig:
    ema_decay: float | None = param(None, "decay d of each question's success estimate p_q ← d·p_q + (1 − d)·r̄_q "
                                          "(required: docs/methods.md §2.14 lists no default)")
    p_star: float = param(0.5, "success rate p* the weight peaks at")
    tau: float = param(0.25, "width τ of the Gaussian weight exp(−(p_q − p*)²/(2τ²))")
    apply: str = param("loss", "loss: ω_q multiplies the loss of q's rows (docs/methods.md §2.14), problems drawn uniformly | "
                               "sampling: problems drawn ∝ ω_q from pool_factor·n candidates, no loss weight")
    prior: float | None = param(None, "p_q of a question never seen; None = no prior: in loss mode its first "
                                      "estimate is its own group's success, in sampling mode an unseen candidate "
                                      "gets the mean weight of the seen ones (never the most favoured)")
    pool_size: int = param(0, "0 = fresh task problems each step; > 0 = a fixed pool of this many drawn once, "
                              "so questions recur and their estimates matter")
    pool_seed: int = param(0, "task stream the fixed pool is drawn from")
    pool_factor: int = param(4, "sampling mode: candidates per selected problem")

    def __post_init__(self) -> None:
        if self.ema_decay is None or not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"curriculum: ema_decay is required, in [0, 1); got {self.ema_decay}")
        if self.tau <= 0 or self.pool_factor < 1 or self.pool_size < 0:
            raise ValueError(f"curriculum: tau must be > 0, pool_factor >= 1 and pool_size >= 0, got "
                             f"{self.tau}, {self.pool_factor}, {self.pool_size}")
        if self.apply not in APPLY:
            raise ValueError(f"curriculum: apply must be one of {APPLY}, got '{self.apply}'")
        if self.prior is not None and not 0.0 <= self.prior <= 1.0:
            raise ValueError(f"curriculum: prior must be in [0, 1] or None, got {self.prior}")


def curriculum_weights(p: Tensor, p_star: float, tau: float) -> Tensor:
    """(Q,) ``ω_q = exp(−(p_q − p*)²/(2τ²))`` normalised to mean 1 over the given questions."""
    w = torch.exp(-((p - p_star) ** 2) / (2.0 * tau**2))
    return w / w.mean()


@register("selector", "curriculum")
class Curriculum(Selector):
    """Weight each question's loss by how close its estimated success rate is to p*.

    Paper: "CVPO: Curriculum-guided Value-variance Policy Optimization" (arXiv id unknown; seed
    abstract, docs/methods.md §2.14). RECONSTRUCTION: the Gaussian weight, the EMA success estimate, and
    its initialisation (a question's first estimate is its first group's success rate, not a prior).

    Equation: ``p_q ← d·p_q + (1 − d)·mean_i r_{q,i}`` over q's rows of the step (p_q = mean_i r_{q,i}
    on q's first visit, or ``prior`` when set); ``ω_q = exp(−(p_q − p*)²/(2τ²))`` normalised to mean 1
    over the step's questions. ``apply = loss`` (docs/methods.md §2.14): the advantages of q's rows are multiplied
    by ω_q, which scales q's policy-gradient loss by ω_q (exactly, for PPO-clip-type surrogates with
    ω > 0); problems come uniformly from the task or the fixed pool. ``apply = sampling``: n of
    ``pool_factor·n`` candidates drawn without replacement ∝ ω_q, no loss weight.

    Differs from uniform: keeps per-question success estimates (saved in checkpoints) and focuses the
    update on questions of matched difficulty. Data parallel: ``row_weights`` and ``observe`` see the
    global batch, so every rank keeps the same estimates and weights.

    Shapes: → list of n problems; row_weights / observe read rewards (N, K) and the rows' problems
    → (N,) weights. Metrics: ``select/loss_weight_min|max|std`` (logged by the trainer).
    """

    Config = CurriculumConfig
    paper = "CVPO: Curriculum-guided Value-variance Policy Optimization (arXiv id unknown; seed abstract)"

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.success: dict[str, float] = {}  # uid → EMA success estimate p_q
        self._pool: list[Problem] | None = None

    def select(self, task: Any, n: int, step: int, seed: int) -> list[Problem]:
        cfg = self.config
        if cfg.apply == "loss":
            if cfg.pool_size == 0:
                return task.problems(n, seed=seed)
            pool = self._pool_of(task)
            picks = random.Random(f"curriculum:{seed}").sample(range(len(pool)), min(n, len(pool)))
            return [pool[i] for i in sorted(picks)]
        candidates = self._candidates(task, n * cfg.pool_factor, seed)
        weights = self._sampling_weights(candidates)
        rng = random.Random(seed)
        keys = [rng.random() ** (1.0 / w) if w > 0 else 0.0 for w in weights]  # weighted draw w/o replacement
        chosen = sorted(range(len(candidates)), key=lambda i: -keys[i])[:n]
        return [candidates[i] for i in sorted(chosen)]

    def _pool_of(self, task: Any) -> list[Problem]:
        if self._pool is None:
            self._pool = problem_pool(task, self.config.pool_size, self.config.pool_seed)
        return self._pool

    def _candidates(self, task: Any, k: int, seed: int) -> list[Problem]:
        if self.config.pool_size == 0:
            return task.problems(k, seed=seed)
        pool = self._pool_of(task)
        return [pool[i] for i in sorted(random.Random(f"curriculum:{seed}").sample(range(len(pool)), min(k, len(pool))))]

    def _sampling_weights(self, candidates: list[Problem]) -> list[float]:
        """ω of each candidate; unseen ones get ω(prior), or with no prior the mean ω of the seen ones."""
        cfg = self.config
        seen = [q.uid in self.success or cfg.prior is not None for q in candidates]
        p = torch.tensor([self.success.get(q.uid, cfg.p_star if cfg.prior is None else cfg.prior)
                          for q in candidates], dtype=torch.float64)  # unseen without a prior: replaced below
        w = torch.exp(-((p - cfg.p_star) ** 2) / (2.0 * cfg.tau**2))
        known = torch.tensor(seen)
        neutral = w[known].mean() if bool(known.any()) else torch.tensor(1.0, dtype=torch.float64)
        return torch.where(known, w, neutral).tolist()

    def _estimates(self, feedback: dict[str, Any]) -> dict[str, float]:
        """uid → p_q after this step's rows (the EMA update ``observe`` commits)."""
        totals: dict[str, list[float]] = {}
        for problem, r in zip(feedback["problems"], feedback["rewards"][:, 0].tolist()):
            totals.setdefault(problem.uid, []).append(float(r))
        d, out = self.config.ema_decay, {}
        for uid, rs in totals.items():
            mean = sum(rs) / len(rs)
            prev = self.success.get(uid, self.config.prior)
            out[uid] = mean if prev is None else d * prev + (1.0 - d) * mean
        return out

    def row_weights(self, feedback: dict[str, Any]) -> Tensor | None:
        """(N,) ω of each row's question, mean 1 over the step's questions (loss mode), else None."""
        if self.config.apply != "loss":
            return None
        p = self._estimates(feedback)
        uids = list(p)
        w = curriculum_weights(torch.tensor([p[u] for u in uids], dtype=torch.float64),
                               self.config.p_star, self.config.tau)
        by_uid = dict(zip(uids, w.tolist()))
        return torch.tensor([by_uid[q.uid] for q in feedback["problems"]], dtype=torch.float32)

    def observe(self, feedback: dict[str, Any]) -> None:
        self.success.update(self._estimates(feedback))

    def state_dict(self) -> dict[str, Any]:
        return {"success": dict(self.success)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.success = {str(k): float(v) for k, v in state["success"].items()}
