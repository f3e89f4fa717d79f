"""KGPS: Kalman-guided prompt selection — a Kalman filter per prompt on its logit success rate."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlvr.registry import param, register
from rlvr.selection.base import Selector
from rlvr.supervision import problem_pool, weighted_draw
from rlvr.types import Problem

MAGNITUDES = ("kl", "param_sq_norm", "grad_norm_sq", "none")
MEASURED = {"kl": "optim/policy_kl", "param_sq_norm": "optim/param_delta_sq"}  # u_t → the trainer's metric
_TRAINER_MEASURE = {"kl": "policy_kl", "param_sq_norm": "param_delta_sq"}
UTILITIES = ("p(1-p)", "sqrt(p(1-p))")
SELECTIONS = ("top_b", "proportional")


@dataclass(frozen=True)
class KGPSConfig:
    prior_var: float = param(1.0, "prior variance P_0 of every prompt's logit success rate (prior mean 0)")
    q0: float = param(1e-3, "process noise floor q_0 added to every prompt's variance each step")
    kappa: float = param(1.0, "process noise per unit of policy-update size: Q_t = q_0 + κ·u_t")
    update_magnitude: str = param("kl", "u_t, measured by the trainer after each update: kl = KL(π_t‖π_{t−1}) "
                                        "on the step's trained tokens | param_sq_norm = ‖θ_t − θ_{t−1}‖² | "
                                        "grad_norm_sq = optim/grad_norm² (a proxy, before clipping and Adam) | "
                                        "none (u = 0)")
    utility: str = param("p(1-p)", "u(p) whose posterior expectation ranks prompts: p(1-p) | sqrt(p(1-p))")
    gh_nodes: int = param(20, "Gauss–Hermite nodes of the expectation over N(μ, P)")
    selection: str = param("top_b", "top_b: the n highest utilities | proportional: n drawn ∝ utility")
    pool_size: int = param(256, "prompts tracked (a pool drawn once); 0 = every training row of a dataset task")
    pool_seed: int = param(0, "task stream the pool is drawn from")
    success_threshold: float = param(0.5, "a rollout counts as a success when its objective-0 reward is >= this")

    def __post_init__(self) -> None:
        if self.prior_var <= 0 or self.q0 < 0 or self.kappa < 0 or self.gh_nodes < 1 or self.pool_size < 0:
            raise ValueError("kgps: need prior_var > 0, q0 >= 0, kappa >= 0, gh_nodes >= 1, pool_size >= 0")
        if (self.update_magnitude not in MAGNITUDES or self.utility not in UTILITIES
                or self.selection not in SELECTIONS):
            raise ValueError(f"kgps: update_magnitude in {MAGNITUDES}, utility in {UTILITIES}, selection in "
                             f"{SELECTIONS}; got {self.update_magnitude}, {self.utility}, {self.selection}")


def kalman_predict(var: float, q: float) -> float:
    """Random-walk predict: ``P ← P + Q`` (the mean stays)."""
    return var + q


def kalman_update(mean: float, var: float, k: float, n: int) -> tuple[float, float]:
    """Update with k successes of n: ``z = log((k + ½)/(n − k + ½))``, ``R = 1/((n + 1) p̃ (1 − p̃))``,
    ``p̃ = (k + ½)/(n + 1)`` (delta method), ``K = P/(P + R)``, ``μ ← μ + K(z − μ)``, ``P ← (1 − K)P``."""
    z = math.log((k + 0.5) / (n - k + 0.5))
    p = (k + 0.5) / (n + 1.0)
    r = 1.0 / ((n + 1.0) * p * (1.0 - p))
    gain = var / (var + r)
    return mean + gain * (z - mean), (1.0 - gain) * var


def expected_utility(mean: np.ndarray, var: np.ndarray, utility: str = "p(1-p)", nodes: int = 20) -> np.ndarray:
    """(Q,) ``E_{x∼N(μ, P)}[u(σ(x))]`` by Gauss–Hermite: ``(1/√π) Σ_j w_j u(σ(μ + √(2P)·x_j))``."""
    x, w = np.polynomial.hermite.hermgauss(nodes)  # (J,), (J,)
    pts = np.asarray(mean, dtype=np.float64)[:, None] + np.sqrt(2.0 * np.asarray(var, dtype=np.float64))[:, None] * x
    p = 1.0 / (1.0 + np.exp(-pts))  # (Q, J)
    u = p * (1.0 - p)
    if utility == "sqrt(p(1-p))":
        u = np.sqrt(u)
    return (u * w).sum(axis=1) / math.sqrt(math.pi)


@register("selector", "kgps")
class KGPS(Selector):
    """Prompt selection by posterior-expected training utility from a Kalman filter per prompt.

    Paper: "KGPS: Kalman-guided prompt selection" (arXiv id unknown; seed abstract), docs/methods.md §2.17.
    RECONSTRUCTION: the observation model (delta method on the logit of (k + ½)/(n + 1)), the
    process noise ``Q_t = q_0 + κ·u_t``, the utility and the selection rule are the docs/methods.md §2.17 forms.

    Equation. State x_q = logit p_q with posterior N(μ_q, P_q), prior N(0, P_0). ``observe`` after
    step t: update every prompt trained at t with its k successes of n (``kalman_update``), then
    predict all prompts ``P_q ← P_q + Q_t`` with ``u_t`` the step's measured policy-update size
    (so the posterior used at step t + 1 describes π_{t+1}): the trainer measures, after the update,
    ``KL(π_t ‖ π_{t−1})`` on the step's trained tokens (``kl``) or ``‖θ_t − θ_{t−1}‖²``
    (``param_sq_norm``), the two forms docs/methods.md §2.17 lists. ``select``: utilities
    ``U_q = E[u(σ(x_q))]``, u(p) = p(1 − p); top-B prompts (or B drawn ∝ U). Uses only the
    rollouts the step already sampled — no extra rollouts.

    Differs from curriculum (CVPO): tracks uncertainty as well as the estimate, so an uncertain
    easy/hard prompt is revisited (E[p(1 − p)] grows with P when |μ| is large) while a confidently
    solved or hopeless one is not; the uncertainty grows with how much the policy changed.

    Data parallel: ``observe`` gets every rank's rows and the global u_t, so the filter, its
    selection and its checkpoint are the same on every rank.

    Shapes: → list of n problems; observe reads rewards (N, K) and the rows' problems.
    Metrics (``select/``): kgps_update_size, kgps_q, kgps_utility_selected, kgps_var_mean,
    kgps_mean_success, kgps_seen_frac.
    """

    Config = KGPSConfig
    paper = "KGPS: Kalman-guided prompt selection (arXiv id unknown; seed abstract)"

    @property
    def update_measure(self) -> str | None:
        """What the trainer measures after each update for u_t (``rlvr.train.movement``)."""
        return _TRAINER_MEASURE.get(self.config.update_magnitude)

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.mean: dict[str, float] = {}  # uid → μ (absent: prior 0)
        self.var: dict[str, float] = {}  # uid → P (absent: P_0 + Σ Q so far)
        self.noise_total = 0.0  # Σ_t Q_t: the variance an untouched prompt has gained
        self._pool: list[Problem] | None = None
        self._last_utility = 0.0

    def posterior(self, uid: str) -> tuple[float, float]:
        return self.mean.get(uid, 0.0), self.var.get(uid, self.config.prior_var + self.noise_total)

    def utilities(self, problems: list[Problem]) -> np.ndarray:
        """(Q,) the posterior-expected utility of each problem."""
        mv = [self.posterior(p.uid) for p in problems]
        return expected_utility(np.array([m for m, _ in mv]), np.array([v for _, v in mv]),
                                self.config.utility, self.config.gh_nodes)

    def select(self, task: Any, n: int, step: int, seed: int) -> list[Problem]:
        if self._pool is None:
            self._pool = problem_pool(task, self.config.pool_size, self.config.pool_seed)
        utility = self.utilities(self._pool)
        if self.config.selection == "top_b":
            order = sorted(range(len(self._pool)), key=lambda i: (-utility[i], i))
            picks = (order * (n // len(order) + 1))[:n]
        else:
            picks = weighted_draw(utility.tolist(), n, random.Random(f"kgps:{seed}"))
        self._last_utility = float(np.mean(utility[picks]))
        return [_copy(self._pool[i]) for i in sorted(picks)]

    def observe(self, feedback: dict[str, Any]) -> None:
        cfg = self.config
        counts: dict[str, list[float]] = {}
        for problem, r in zip(feedback["problems"], feedback["rewards"][:, 0].tolist()):
            c = counts.setdefault(problem.uid, [0.0, 0.0])
            c[0] += float(r >= cfg.success_threshold)
            c[1] += 1.0
        for uid, (k, n) in counts.items():
            self.mean[uid], self.var[uid] = kalman_update(*self.posterior(uid), k, int(n))
        u = self.update_size(feedback.get("metrics") or {})
        q = cfg.q0 + cfg.kappa * u
        for uid in self.var:
            self.var[uid] = kalman_predict(self.var[uid], q)
        self.noise_total += q
        if feedback.get("metrics") is not None:
            feedback["metrics"].update(self._metrics(u, q))

    def update_size(self, metrics: dict[str, float]) -> float:
        """u_t, the policy's measured update size this step (0 when the trainer did not log it)."""
        kind = self.config.update_magnitude
        if kind in MEASURED:
            return max(float(metrics.get(MEASURED[kind], 0.0)), 0.0)
        if kind == "grad_norm_sq":
            return float(metrics.get("optim/grad_norm", 0.0)) ** 2
        return 0.0

    def _metrics(self, u: float, q: float) -> dict[str, float]:
        pool = self._pool or []
        mv = [self.posterior(p.uid) for p in pool]
        return {"select/kgps_update_size": u, "select/kgps_q": q, "select/kgps_utility_selected": self._last_utility,
                "select/kgps_var_mean": float(np.mean([v for _, v in mv])) if mv else 0.0,
                "select/kgps_mean_success": float(np.mean([1 / (1 + math.exp(-m)) for m, _ in mv])) if mv else 0.0,
                "select/kgps_seen_frac": sum(p.uid in self.mean for p in pool) / max(len(pool), 1)}

    def state_dict(self) -> dict[str, Any]:
        return {"mean": dict(self.mean), "var": dict(self.var), "noise_total": self.noise_total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean = {str(k): float(v) for k, v in state["mean"].items()}
        self.var = {str(k): float(v) for k, v in state["var"].items()}
        self.noise_total = float(state["noise_total"])


def _copy(p: Problem) -> Problem:
    return Problem(p.prompt, p.answer, p.solution, p.uid, dict(p.meta))
