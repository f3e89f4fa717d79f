"""Parallel Shapley: credit each reasoning path of a multi-path rollout by its Shapley value."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch
from torch import Tensor

from rlvr.registry import param, register
from rlvr.rewards.base import RewardShaper
from rlvr.types import BatchError, Rollouts

UTILITIES = ("vote", "best")
ALLOCATIONS = ("proportional", "direct")
Utility = Callable[[int], float]  # v(S) for a coalition given as a bitmask over the P paths


def shapley_exact(value: Utility, n_players: int) -> Tensor:
    """(P,) exact Shapley values ``φ_j = Σ_{S ⊆ [P]∖{j}} |S|!(P−|S|−1)!/P! · (v(S ∪ {j}) − v(S))``
    by enumerating all 2^P coalitions (use for small P)."""
    p = n_players
    table = [float(value(mask)) for mask in range(1 << p)]  # v of every coalition
    weight = [math.factorial(s) * math.factorial(p - s - 1) / math.factorial(p) for s in range(p)]
    phi = torch.zeros(p, dtype=torch.float64)
    for j in range(p):
        bit = 1 << j
        phi[j] = sum(weight[bin(m).count("1")] * (table[m | bit] - table[m]) for m in range(1 << p) if not m & bit)
    return phi.float()


def shapley_permutations(value: Utility, n_players: int, n_perms: int, generator: torch.Generator) -> Tensor:
    """(P,) Monte-Carlo Shapley: the mean marginal contribution ``v(Pre_π(j) ∪ {j}) − v(Pre_π(j))`` over
    ``n_perms`` uniformly random orders π. Each order's marginals telescope to v([P]) − v(∅), so the
    estimate is exactly efficient whatever ``n_perms``; it is unbiased for each φ_j."""
    memo: dict[int, float] = {}

    def v(mask: int) -> float:
        if mask not in memo:
            memo[mask] = float(value(mask))
        return memo[mask]

    phi = torch.zeros(n_players, dtype=torch.float64)
    for _ in range(n_perms):
        mask = 0
        for j in torch.randperm(n_players, generator=generator).tolist():
            phi[j] += v(mask | (1 << j)) - v(mask)
            mask |= 1 << j
    return (phi / max(n_perms, 1)).float()


def path_utility(answers: Sequence[str | None], scores: Sequence[float], mode: str) -> Utility:
    """v(S) of a rollout's paths: ``vote`` — the verifier score of the plurality answer of the paths in
    S (paths with no parsed answer abstain; a tie goes to the answer of the lowest-index tied path);
    ``best`` — the best path score in S. v(∅) = 0."""
    norm = [None if a is None else str(a).strip() for a in answers]

    def v(mask: int) -> float:
        members = [j for j in range(len(norm)) if mask >> j & 1]
        if not members:
            return 0.0
        if mode == "best":
            return max(float(scores[j]) for j in members)
        counts = Counter(norm[j] for j in members if norm[j] is not None)
        if not counts:
            return 0.0
        top = max(counts.values())
        winner = next(j for j in members if norm[j] is not None and counts[norm[j]] == top)
        return float(scores[winner])

    return v


def allocate(phi: Tensor, outcome: float, mode: str) -> Tensor:
    """(P,) path rewards: ``proportional`` r_j = R·φ_j/Σφ (0 when Σφ = 0); ``direct`` r_j = φ_j."""
    if mode == "direct":
        return phi.clone()
    total = float(phi.sum())
    return phi * (outcome / total) if abs(total) > 1e-12 else torch.zeros_like(phi)


@dataclass(frozen=True)
class ParallelShapleyConfig:
    utility: str = param("vote", "v(S): vote (score of the plurality answer of the paths in S) | best (best path "
                                 "score in S) (RECONSTRUCTION: stands in for the paper's generative judge)")
    allocation: str = param("proportional", "proportional: r_j = R_outcome*phi_j/sum(phi) | direct: r_j = phi_j")
    exact_max_paths: int = param(6, "exact Shapley (all 2^P coalitions) up to this many paths, permutations above")
    permutations: int = param(0, "random orders M for the Monte-Carlo estimate (0: 8*P, the docs/methods.md §2.20 default)")
    seed: int = param(0, "seed of the permutation sampler (mixed with each rollout's group id and index)")
    column: int = param(0, "reward objective holding each path's verdict; replaced by the path reward")

    def __post_init__(self) -> None:
        if self.utility not in UTILITIES:
            raise ValueError(f"parallel_shapley: utility must be one of {UTILITIES}, got '{self.utility}'")
        if self.allocation not in ALLOCATIONS:
            raise ValueError(f"parallel_shapley: allocation must be one of {ALLOCATIONS}, got '{self.allocation}'")
        if self.permutations < 0 or self.exact_max_paths < 0:
            raise ValueError("parallel_shapley: permutations and exact_max_paths must be >= 0")


@register("shaper", "parallel_shapley")
class ParallelShapley(RewardShaper):
    """Path-level Shapley credit for multi-path rollouts: each path's reward is its Shapley share.

    Paper: Parallel Shapley, path-level Shapley credit in multi-path reasoning (arXiv id unknown;
    seed abstract), docs/methods.md §2.20. PAPER-ABSTRACT; the utility, allocation and normalisation are a
    RECONSTRUCTION (every choice is a config option with the docs/methods.md §2.20 default where it gives one).

    Equation: paths j ∈ [P] of one rollout are players; ``v(S)`` = score of the answer aggregated from
    the paths in S only, ``v(∅) = 0``; ``φ_j = E_π[v(Pre_π(j) ∪ {j}) − v(Pre_π(j))]`` (exact for
    P ≤ ``exact_max_paths``, else M random orders); ``Σ_j φ_j = v([P]) − v(∅)``;
    ``r_j = R_outcome·φ_j/Σ_k φ_k`` (proportional, R_outcome = v([P]), the aggregate's score) or ``φ_j``.

    Input: the ``multi_path`` sampler's batch, one row per path (``Rollouts.path_rollout`` (N,) and
    ``path_index`` (N,), so every token of row i belongs to path ``path_index[i]``), the
    verifier's per-row verdict in ``rewards[:, column]`` and parsed answers in ``Rollouts.parsed``.
    The path reward goes on every token of its row; GRPO over the group (all paths of all rollouts
    of the prompt) then gives the docs/methods.md §2.20 "GRPO-normalised r_j across the paths of the prompt".

    Differs from the raw verifier reward:
      * a path is paid for what it adds to the aggregate answer, not for its own verdict: a duplicate
        of a correct path shares the credit, a useless path (a null player) gets 0;
      * objective ``column`` becomes r_j (named ``shapley``); the path's own verdict is kept as a last
        objective ``correct``;
      * the aggregate is rule-based (plurality vote), so there are no policy-written aggregation
        tokens; the docs/methods.md §2.20 ``empty_utility: no_path_baseline`` and the generative judge are not built.

    Shapes: rewards (N, K), path_rollout / path_index (N,) → rewards (N, K + 1). Metrics:
    ``reward/shapley_mean``, ``reward/shapley_outcome``, ``reward/shapley_phi_abs``, ``reward/shapley_null_frac``.
    """

    Config = ParallelShapleyConfig
    paper = "Parallel Shapley: path-level Shapley credit in multi-path reasoning (arXiv id unknown; seed abstract)"

    def __call__(self, rollouts: Rollouts) -> Rollouts:
        cfg, n = self.config, rollouts.num_rows
        answers = rollouts.parsed  # (N,)
        if rollouts.path_rollout is None or rollouts.path_index is None or rollouts.rewards is None \
                or len(answers) != n:
            raise BatchError("parallel_shapley: needs the multi_path sampler's path_rollout and path_index "
                             f"(rollout, path per row), verified rewards and parsed answers (Rollouts.parsed) "
                             f"for all {n} rows")
        scores = rollouts.rewards[:, cfg.column].float()  # (N,)
        reward = torch.zeros(n)  # (N,)
        phis, outcomes = [], []
        rollout_ids, path = rollouts.path_rollout.tolist(), rollouts.path_index
        for r in sorted(set(rollout_ids)):
            rows = sorted((k for k, rid in enumerate(rollout_ids) if rid == r), key=lambda k: int(path[k]))
            phi, outcome = self._credit([answers[k] for k in rows], [float(scores[k]) for k in rows],
                                        seed=cfg.seed * 1_000_003 + int(rollouts.group_ids[rows[0]]) * 101 + r)
            reward[rows] = allocate(phi, outcome, cfg.allocation)
            phis.append(phi)
            outcomes.append(outcome)
        reward = reward.to(scores.device)
        rewards = torch.cat([rollouts.rewards.clone(), scores[:, None]], dim=1)  # (N, K + 1)
        rewards[:, cfg.column] = reward
        names = list(rollouts.reward_names) or [f"objective_{k}" for k in range(rollouts.rewards.shape[1])]
        names = [*names[:cfg.column], "shapley", *names[cfg.column + 1:], "correct"]
        phi_all = torch.cat(phis)
        metrics = {"reward/shapley_mean": reward.mean().item(),
                   "reward/shapley_outcome": sum(outcomes) / len(outcomes),
                   "reward/shapley_phi_abs": phi_all.abs().mean().item(),
                   "reward/shapley_null_frac": (phi_all.abs() < 1e-9).float().mean().item()}
        meta = {**rollouts.meta, "shaper_metrics": {**rollouts.meta.get("shaper_metrics", {}), **metrics}}
        return replace(rollouts, rewards=rewards, reward_names=names, meta=meta)

    def _credit(self, answers: list[str | None], scores: list[float], seed: int) -> tuple[Tensor, float]:
        """(P,) Shapley values of one rollout's paths and its outcome v([P])."""
        p = len(scores)
        v = path_utility(answers, scores, self.config.utility)
        if p <= self.config.exact_max_paths:
            phi = shapley_exact(v, p)
        else:
            gen = torch.Generator().manual_seed(seed % (2**63 - 1))
            phi = shapley_permutations(v, p, self.config.permutations or 8 * p, gen)
        return phi, v((1 << p) - 1)
