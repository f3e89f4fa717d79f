"""MMPO (docs/methods.md §2.15): golden moment weights (G = 8 table), the K = 2 reduction to dr_grpo,
unbiasedness of the moment estimator, leave-one-out, invariances and errors. Every expected number
is derived by hand in the comment above it."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr import AdvantageInputs, build
from rlvr.advantages.mmpo import failure_moments
from rlvr.types import BatchError


def inputs(rewards, groups, mask=None, **kw) -> AdvantageInputs:
    r = torch.tensor(rewards, dtype=torch.float32)
    r = r.unsqueeze(1) if r.dim() == 1 else r
    m = torch.ones(r.shape[0], 1, dtype=torch.bool) if mask is None else torch.tensor(mask)
    return AdvantageInputs(rewards=r, mask=m, group_ids=torch.tensor(groups), **kw)


def run(inp: AdvantageInputs, name: str = "mmpo", **params):
    return build("advantage", name, **params)(inp)


def group_of_8(k: int) -> AdvantageInputs:
    return inputs([1.0] * k + [0.0] * (8 - k), [0] * 8)


# --- golden values ----------------------------------------------------------------------------

# w = Σ_{m=1}^{K−1} m·f̂^(m−1), f̂^(j) = C(8−k, j)/C(8, j):
#   k=1: f̂^(j) = (8−j)/8 → K=2: 1; K=4: 1 + 2·7/8 + 3·6/8 = 1 + 1.75 + 2.25 = 5;
#        K=8: Σ_{m=1}^{7} m(9−m)/8 = (8+14+18+20+20+18+14)/8 = 14.
#   k=4: f̂ = (1, 4/8, 6/28, 4/56, 1/70, 0, …) → K=4: 1 + 1 + 3·6/28 = 2.642857;
#        K=8: 1 + 1 + 0.642857 + 4·4/56 + 5/70 = 3.0.
#   k=7: f̂ = (1, 1/8, 0, …) → K=4 and K=8: 1 + 2/8 = 1.25.
@pytest.mark.parametrize("k, budget, w", [
    (1, 2, 1.0), (1, 4, 5.0), (1, 8, 14.0), (4, 4, 2.642857), (4, 8, 3.0), (7, 4, 1.25), (7, 8, 1.25),
    (4, 2, 1.0), (7, 2, 1.0),
])
def test_moment_weight_table_g8(k, budget, w):
    out = run(group_of_8(k), budget_K=budget)
    assert float(out.metrics["moment_weight_mean"]) == pytest.approx(w, abs=1e-5)
    # A = w·(r − k/8)
    expected = w * (torch.tensor([1.0] * k + [0.0] * (8 - k)) - k / 8)
    torch.testing.assert_close(out.advantages[:, 0], expected, atol=1e-5, rtol=0)


def test_leave_one_out_golden():
    # G = 4, r = (1,0,0,0), K = 3: w = 1 + 2·f̂^(1).
    # hypergeometric: k = 1 of 4, f̂^(1) = 3/4 → w = 2.5; A = 2.5·(r − 0.25) = (1.875, −0.625 ×3).
    # leave-one-out: row 0 sees 0 of 3 successes, f̂^(1) = 1 → w = 3, A = 3·0.75 = 2.25;
    # rows 1–3 see 1 of 3, f̂^(1) = 2/3 → w = 7/3, A = −(7/3)·0.25 = −0.583333.
    inp = inputs([1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0])
    torch.testing.assert_close(run(inp, budget_K=3).advantages[:, 0],
                               torch.tensor([1.875, -0.625, -0.625, -0.625]))
    loo = run(inp, budget_K=3, moment_estimator="leave_one_out").advantages[:, 0]
    torch.testing.assert_close(loo, torch.tensor([2.25, -7 / 12, -7 / 12, -7 / 12]))


def test_moment_weights_golden():
    # c = (0, 1), K = 3: w = 0·1·f̂^(0) + 1·2·f̂^(1) = 2·3/4 = 1.5 for r = (1,0,0,0).
    out = run(inputs([1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0]), budget_K=3, moment_weights=[0.0, 1.0])
    assert float(out.metrics["moment_weight_mean"]) == pytest.approx(1.5)


def test_fractional_rewards_golden():
    # r = (1, 0.5): k = 1.5 of n = 2, f̂^(1) = (2 − 1.5)/2 = 0.25, K = 3 → w = 1 + 2·0.25 = 1.5;
    # p̂ = 0.75 → A = 1.5·(±0.25) = (0.375, −0.375).
    out = run(inputs([1.0, 0.5], [0, 0]), budget_K=3)
    torch.testing.assert_close(out.advantages[:, 0], torch.tensor([0.375, -0.375]))


def test_failure_moments_are_unbiased():
    # E_{k~Binomial(G,p)}[C(G−k, j)/C(G, j)] = (1 − p)^j for every j ≤ G (exact sum, not sampled).
    g, p = 8, 0.3
    k = torch.arange(g + 1, dtype=torch.float64)
    pmf = torch.tensor([math.comb(g, i) * p ** i * (1 - p) ** (g - i) for i in range(g + 1)], dtype=torch.float64)
    moments = failure_moments(k, torch.full_like(k, g), g)  # (G+1, G+1)
    torch.testing.assert_close(pmf @ moments, (1 - p) ** torch.arange(g + 1, dtype=torch.float64))
    # and f̂^(j) is C(G−k, j)/C(G, j) itself, e.g. k = 3, j = 2: C(5,2)/C(8,2) = 10/28
    assert float(moments[3, 2]) == pytest.approx(10 / 28)


# --- reductions -------------------------------------------------------------------------------

@pytest.mark.parametrize("estimator", ["hypergeometric", "leave_one_out"])
def test_budget_two_is_dr_grpo(estimator):
    # K = 2: w = c_1·1·f̂^(0) = 1 → A = r − p̂ (Dr. GRPO), for every estimator.
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(9, 4, generator=g) > 0.3
    r = torch.rand(9, 1, generator=g)
    inp = AdvantageInputs(r, mask, torch.tensor([2, 0, 1, 0, 2, 1, 1, 0, 2]))
    torch.testing.assert_close(run(inp, budget_K=2, moment_estimator=estimator).advantages,
                               run(inp, "dr_grpo").advantages)


def test_larger_budget_up_weights_hard_prompts():
    # Two groups of 4: hard (1 of 4) and easy (3 of 4). K = 4: hard gets
    # w = 1 + 2·3/4 + 3·C(3,2)/C(4,2) = 1 + 1.5 + 1.5 = 4, easy w = 1 + 2·1/4 + 0 = 1.5.
    inp = inputs([1, 0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 1, 1, 1, 1])
    a = run(inp, budget_K=4).advantages[:, 0]
    assert float(a[0]) == pytest.approx(4 * 0.75) and float(a[4]) == pytest.approx(1.5 * 0.25)


# --- invariances ------------------------------------------------------------------------------

def test_masked_tokens_are_zero_and_rows_permute():
    g = torch.Generator().manual_seed(1)
    r = (torch.rand(8, 1, generator=g) > 0.5).float()
    mask = torch.rand(8, 3, generator=g) > 0.4
    groups = torch.tensor([1, 0, 1, 0, 0, 1, 1, 0])
    inp = AdvantageInputs(r, mask, groups)
    out = run(inp, budget_K=4).advantages
    assert (out[~mask] == 0).all() and out.abs().sum() > 0
    perm = torch.tensor([3, 6, 0, 7, 2, 5, 1, 4])
    torch.testing.assert_close(run(AdvantageInputs(r[perm], mask[perm], groups[perm] * 7), budget_K=4).advantages,
                               out[perm])


def test_singleton_group_gets_zero():
    out = run(inputs([1.0, 1.0, 0.0], [5, 9, 9]), budget_K=2).advantages[:, 0]
    torch.testing.assert_close(out, torch.tensor([0.0, 0.5, -0.5]))


# --- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("params, match", [
    ({"budget_K": 1}, "budget_K must be >= 2"),
    ({"budget_K": 3, "moment_weights": [1.0]}, "needs K−1 = 2 entries"),
    ({"budget_K": 3, "moment_weights": [1.0, -1.0]}, "moment_weights must be >= 0"),
    ({"budget_K": 3, "moment_estimator": "plugin"}, "moment_estimator"),
])
def test_bad_config(params, match):
    with pytest.raises(ValueError, match=match):
        build("advantage", "mmpo", **params)


def test_bad_inputs():
    inp = inputs([1.0, 0.0], [0, 0])
    with pytest.raises(BatchError, match="budget_K is required"):
        run(inp)  # builds (so `rlvr list` and verl registration work) but refuses to run unset
    with pytest.raises(BatchError, match=r"rewards must lie in \[0, 1\]"):
        run(inputs([2.0, 0.0], [0, 0]), budget_K=2)
    with pytest.raises(BatchError, match="a group has 2 usable rows, but moments up to order 3"):
        run(inp, budget_K=5)  # f̂^(3) needs 3 rows
    with pytest.raises(BatchError, match="a group has 1 usable rows"):
        run(inp, budget_K=4, moment_estimator="leave_one_out")  # LOO: n − 1 = 1 < 2
