"""Parallel Shapley (docs/methods.md §2.20): exact values by hand, the permutation estimator, efficiency,
symmetry, null players, allocation, and the shaper on a multi-path batch."""

from __future__ import annotations

import pytest
import torch

from rlvr.registry import build
from rlvr.rewards.shapley import allocate, path_utility, shapley_exact, shapley_permutations
from rlvr.types import BatchError, Problem, Rollouts


def _table(values: list[float]):
    return lambda mask: values[mask]


def _random_table(p: int, seed: int) -> list[float]:
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(1 << p, generator=g).tolist()
    t[0] = 0.0
    return t


def test_three_path_toy_by_hand():
    # docs/methods.md §2.20 test 1: v(S) = 1[0 ∈ S or 1 ∈ S] (path 1 duplicates path 0, path 2 useless).
    # Weights |S|!(P−|S|−1)!/P! for P = 3: |S|=0 → 1/3, |S|=1 → 1/6, |S|=2 → 1/3.
    # φ_0: S=∅: 1·1/3; S={1}: 0; S={2}: 1·1/6; S={1,2}: 0 → 1/2; φ_1 = 1/2 by symmetry; φ_2: every
    # marginal is 0 → 0. Sum 1 = v(all) − v(∅).
    v = lambda mask: float(bool(mask & 0b011))  # noqa: E731
    assert torch.allclose(shapley_exact(v, 3), torch.tensor([0.5, 0.5, 0.0]))


def test_vote_utility_with_a_harmful_path_by_hand():
    # Answers ["3", "7", "7"], verdicts [0, 1, 1], plurality vote (tie → lowest-index path):
    # v(∅)=0, v{0}=0, v{1}=1, v{2}=1, v{0,1}=0 (tie → "3"), v{0,2}=0, v{1,2}=1, v{0,1,2}=1 ("7" wins 2–1).
    # φ_0 = 1/3·0 + 1/6·(v01−v1) + 1/6·(v02−v2) + 1/3·(v012−v12) = 1/6·(−1) + 1/6·(−1) + 0 = −1/3;
    # φ_1 = 1/3·v1 + 1/6·(v01−v0) + 1/6·(v12−v2) + 1/3·(v012−v02) = 1/3 + 0 + 0 + 1/3 = 2/3 = φ_2.
    v = path_utility(["3", "7", "7"], [0.0, 1.0, 1.0], "vote")
    assert [v(m) for m in range(8)] == [0, 0, 1, 0, 1, 0, 1, 1]
    assert torch.allclose(shapley_exact(v, 3), torch.tensor([-1 / 3, 2 / 3, 2 / 3]), atol=1e-6)
    best = path_utility(["3", "7", None], [0.0, 1.0, 0.0], "best")  # best path in S: 1[1 ∈ S]
    assert torch.allclose(shapley_exact(best, 3), torch.tensor([0.0, 1.0, 0.0]))
    assert path_utility([None, None], [1.0, 1.0], "vote")(0b11) == 0.0  # nobody answers: 0


def test_permutation_estimator_converges_to_exact():
    # Fixed seed: M = 4000 random orders are within 0.03 of exact on the toy and on a random 5-player game.
    v = path_utility(["3", "7", "7"], [0.0, 1.0, 1.0], "vote")
    est = shapley_permutations(v, 3, 4000, torch.Generator().manual_seed(0))
    assert torch.allclose(est, shapley_exact(v, 3), atol=0.03)
    table = _random_table(5, seed=1)
    exact = shapley_exact(_table(table), 5)
    est = shapley_permutations(_table(table), 5, 4000, torch.Generator().manual_seed(1))
    assert torch.allclose(est, exact, atol=0.03)
    rough = shapley_permutations(_table(table), 5, 3, torch.Generator().manual_seed(1))
    assert not torch.allclose(rough, exact, atol=1e-3)  # few orders: only approximate


@pytest.mark.parametrize("p", [2, 4, 6])
def test_efficiency_exact_and_sampled(p):
    # Σ_j φ_j = v([P]) − v(∅); each order's marginals telescope, so the sampled estimate is efficient too.
    table = _random_table(p, seed=p)
    table[0] = 0.25  # a non-zero v(∅) is subtracted
    target = table[(1 << p) - 1] - table[0]
    assert shapley_exact(_table(table), p).sum().item() == pytest.approx(target, abs=1e-5)
    est = shapley_permutations(_table(table), p, 7, torch.Generator().manual_seed(0))
    assert est.sum().item() == pytest.approx(target, abs=1e-5)


def test_symmetric_paths_equal_and_null_player_zero():
    # Paths 2 and 3 give the same answer (symmetric players: swapping them leaves every v(S)); path 1
    # never answers (null player); path 0's wrong answer wins the ties it is in, so it hurts.
    v = path_utility(["4", None, "5", "5"], [0.0, 0.0, 1.0, 1.0], "vote")
    phi = shapley_exact(v, 4)
    assert phi[2].item() == pytest.approx(phi[3].item(), abs=1e-6)
    assert phi[1].item() == pytest.approx(0.0, abs=1e-7)
    assert phi[2].item() > 0 > phi[0].item()


def test_allocation():
    phi = torch.tensor([0.25, 0.75, 0.0])
    # proportional: r_j = R·φ_j/Σφ = 0.8·φ_j/1.0; direct: φ itself; Σφ = 0 → no credit.
    assert torch.allclose(allocate(phi, 0.8, "proportional"), torch.tensor([0.2, 0.6, 0.0]))
    assert torch.equal(allocate(phi, 0.8, "direct"), phi)
    assert torch.equal(allocate(torch.tensor([0.5, -0.5]), 1.0, "proportional"), torch.zeros(2))


def _multi_path_batch(answers: list[str | None], verdicts: list[float], p: int, groups: list[int]) -> Rollouts:
    n = len(answers)
    index = torch.arange(n)
    batch = Rollouts(problems=[Problem(prompt="q")] * n, prompt_ids=torch.ones(n, 1, dtype=torch.long),
                     prompt_mask=torch.ones(n, 1, dtype=torch.bool), completion_ids=torch.ones(n, 2, dtype=torch.long),
                     completion_mask=torch.ones(n, 2, dtype=torch.bool), group_ids=torch.tensor(groups),
                     rewards=torch.tensor(verdicts)[:, None], reward_names=["correct"], texts=[""] * n,
                     path_rollout=index // p, path_index=index % p, parsed=list(answers))
    return batch


def test_shaper_credits_each_path():
    # Rollout 0: the harmful-path toy → φ = [−1/3, 2/3, 2/3], R = v(all) = 1, proportional = φ.
    # Rollout 1: three wrong paths → v ≡ 0 → all 0 (and v(all) = 0).
    batch = _multi_path_batch(["3", "7", "7", "1", "2", "2"], [0, 1, 1, 0, 0, 0], 3, [4, 4, 4, 4, 4, 4])
    out = build("shaper", "parallel_shapley")(batch)
    assert out.reward_names == ["shapley", "correct"]
    assert torch.allclose(out.rewards[:, 0], torch.tensor([-1 / 3, 2 / 3, 2 / 3, 0, 0, 0]), atol=1e-6)
    assert torch.equal(out.rewards[:, 1], batch.rewards[:, 0])
    m = out.meta["shaper_metrics"]
    assert m["reward/shapley_outcome"] == pytest.approx(0.5)  # one of two rollouts' aggregates is right
    assert m["reward/shapley_null_frac"] == pytest.approx(0.5)
    # Monte-Carlo above exact_max_paths: close to the exact credit with many orders.
    mc = build("shaper", "parallel_shapley", exact_max_paths=0, permutations=3000)(batch)
    assert torch.allclose(mc.rewards[:, 0], out.rewards[:, 0], atol=0.04)
    assert not torch.equal(mc.rewards[:, 0], out.rewards[:, 0])
    bare = _multi_path_batch(["1", "1"], [1.0, 1.0], 2, [0, 0])
    bare.path_rollout = bare.path_index = None  # a plain batch: no paths to credit
    with pytest.raises(BatchError, match="multi_path"):
        build("shaper", "parallel_shapley")(bare)
