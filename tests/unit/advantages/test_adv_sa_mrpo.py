"""SA-MRPO (docs/methods.md §2.9): golden values, the sign flip, reductions to gdpo/grpo, invariances, state
and errors. Every expected number is derived by hand in the comment above it."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr import AdvantageInputs, build
from rlvr.advantages.sa_mrpo import saturation_weights
from rlvr.types import BatchError

S3 = math.sqrt(3) / 2  # 0.866025


def inputs(rewards, groups, mask=None, **kw) -> AdvantageInputs:
    r = torch.tensor(rewards, dtype=torch.float32)
    r = r.unsqueeze(1) if r.dim() == 1 else r
    m = torch.ones(r.shape[0], 1, dtype=torch.bool) if mask is None else torch.tensor(mask)
    return AdvantageInputs(rewards=r, mask=m, group_ids=torch.tensor(groups), **kw)


def run(inp: AdvantageInputs, name: str = "sa_mrpo", **params):
    return build("advantage", name, **params)(inp)


def random_batch(seed: int, k: int, equal_saturation: bool = False) -> AdvantageInputs:
    g = torch.Generator().manual_seed(seed)
    r = (torch.rand(12, k, generator=g) > 0.5).float()
    if equal_saturation:  # every column a row-permutation of column 0: equal batch means
        r = torch.stack([r[torch.randperm(12, generator=g), 0] for _ in range(k)], dim=1)
    mask = torch.rand(12, 5, generator=g) > 0.3
    mask[:, 0] = True
    groups = torch.tensor([3, 1, 3, 0, 1, 0, 3, 1, 0, 3, 1, 0])  # 3 groups of 4, interleaved
    return AdvantageInputs(rewards=r, mask=mask, group_ids=groups)


# --- golden values ----------------------------------------------------------------------------

def test_sign_flip_weights_golden():
    # docs/methods.md §2.9: Â = (+1.0, −0.5); equal weights give +0.5. With s = (0.95, 0.2), γ = 1:
    # raw = (0.05, 0.8), sum 0.85, w = 2·raw/0.85 = (0.117647, 1.882353);
    # A = 0.117647·1.0 − 1.882353·0.5 = −0.823529 < 0: the sign flips.
    w = saturation_weights(torch.tensor([0.95, 0.2], dtype=torch.float64), torch.ones(2), 1.0)
    torch.testing.assert_close(w, torch.tensor([0.1 / 0.85, 1.6 / 0.85], dtype=torch.float64))
    a_hat = torch.tensor([1.0, -0.5], dtype=torch.float64)
    assert float(a_hat @ torch.ones(2, dtype=torch.float64)) == pytest.approx(0.5)
    assert float(a_hat @ w) == pytest.approx(0.1 / 0.85 - 0.8 / 0.85, abs=1e-9)
    assert float(a_hat @ w) < 0


def test_sign_flip_batch_golden():
    # Group 0 (rows 0, 2, 4, 6 — interleaved with group 1): objective 0 = (1,0,0,0): mean 0.25,
    # unbiased sd = sqrt(0.75/3) = 0.5 → Â0 = (1.5, −0.5, −0.5, −0.5); objective 1 = (0,0,1,1):
    # mean 0.5, sd = sqrt(1/3) → Â1 = (−S3, −S3, +S3, +S3), S3 = 0.866025.
    # Group 1 (rows 1, 3, 5, 7) all (1, 0): zero std → Â = 0.
    # Saturation s = (5/8, 2/8); γ = 1: raw = (0.375, 0.75), w = 2·raw/1.125 = (2/3, 4/3).
    # Row 0: (2/3)·1.5 − (4/3)·S3 = 1 − 1.154701 = −0.154701 (GDPO, weights 1: 1.5 − S3 = +0.633975).
    # Row 2: −1/3 − 1.154701 = −1.488034; rows 4, 6: −1/3 + 1.154701 = 0.821367.
    r = [[1, 0], [1, 0], [0, 0], [1, 0], [0, 1], [1, 0], [0, 1], [1, 0]]
    inp = inputs(r, [0, 1, 0, 1, 0, 1, 0, 1])
    out = run(inp)
    a = 4 / 3 * S3
    expected = torch.tensor([1 - a, 0, -1 / 3 - a, 0, -1 / 3 + a, 0, -1 / 3 + a, 0])
    torch.testing.assert_close(out.advantages[:, 0], expected, atol=1e-5, rtol=0)
    assert float(run(inp, "gdpo", whiten="none").advantages[0, 0]) == pytest.approx(1.5 - S3, abs=1e-5)
    assert float(out.metrics["saturation_0"]) == pytest.approx(5 / 8)
    assert float(out.metrics["saturation_1"]) == pytest.approx(2 / 8)
    assert float(out.metrics["weight_0"]) == pytest.approx(2 / 3)
    assert float(out.metrics["weight_1"]) == pytest.approx(4 / 3)


def test_saturated_objective_gets_weight_zero():
    # s = (0.5, 1.0): raw = (0.5, 0) → w = (2, 0). In a batch whose objective 1 is all ones,
    # A = 2·Â0 = 2·GRPO(objective 0). A fully saturated batch gets all-zero weights, not NaN.
    w = saturation_weights(torch.tensor([0.5, 1.0]), torch.ones(2), 1.0)
    assert w.tolist() == [2.0, 0.0]
    assert saturation_weights(torch.ones(2), torch.ones(2), 1.0).tolist() == [0.0, 0.0]
    inp = inputs([[1, 1], [0, 1], [1, 1], [1, 1]], [0, 0, 1, 1])
    grpo = run(inputs([1, 0, 1, 1], [0, 0, 1, 1]), "grpo").advantages
    torch.testing.assert_close(run(inp).advantages, 2 * grpo)


def test_zero_std_objective_contributes_zero_not_nan():
    # Objective 1 is constant (0.5) in group 0: its Â is 0 even with eps = 0 (0/0 otherwise).
    # Objective 0 = (1, 0): population sd 0.5 (ddof 0) → Â0 = (1, −1). s = (0.5, 0.5) → w = (1, 1).
    out = run(inputs([[1, 0.5], [0, 0.5]], [0, 0]), eps=0.0, ddof=0).advantages
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[:, 0], torch.tensor([1.0, -1.0]))


def test_reward_bounds_scale_the_saturation():
    # Objective 0 in [0, 10]: rewards (10, 0) → mean 5 → s0 = 0.5; objective 1 (1, 1) → s1 = 1.
    out = run(inputs([[10.0, 1.0], [0.0, 1.0]], [0, 0]), reward_bounds=[[0, 10], [0, 1]])
    assert float(out.metrics["saturation_0"]) == pytest.approx(0.5)
    assert float(out.metrics["weight_1"]) == 0.0


# --- reductions -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1])
def test_equal_saturation_is_gdpo(seed):
    # Equal s_k → w_k = K·1/K = 1: GDPO with uniform weights (whitening off on both sides, and
    # on both sides with verl-style token whitening).
    inp = random_batch(seed, k=3, equal_saturation=True)
    assert len({round(float(x), 6) for x in inp.rewards.mean(0)}) == 1
    torch.testing.assert_close(run(inp).advantages, run(inp, "gdpo", whiten="none").advantages)
    torch.testing.assert_close(run(inp, batch_whiten=True).advantages, run(inp, "gdpo").advantages)


def test_equal_saturation_with_base_weights_is_gdpo_up_to_scale():
    # Base weights w⁰ = (1, 3): SA-MRPO uses K·w⁰/Σw⁰ = (0.5, 1.5) = w⁰/2, GDPO uses w⁰ itself.
    inp = random_batch(2, k=2, equal_saturation=True)
    inp.reward_weights = torch.tensor([1.0, 3.0])
    torch.testing.assert_close(2 * run(inp).advantages, run(inp, "gdpo", whiten="none").advantages)
    torch.testing.assert_close(run(inp, batch_whiten=True).advantages, run(inp, "gdpo").advantages,
                               atol=1e-5, rtol=0)


def test_gamma_zero_ignores_saturation():
    inp = random_batch(7, k=2)
    assert float(inp.rewards[:, 0].mean()) != float(inp.rewards[:, 1].mean())
    torch.testing.assert_close(run(inp, saturation_gamma=0.0).advantages,
                               run(inp, "gdpo", whiten="none").advantages)
    assert not torch.allclose(run(inp).advantages, run(inp, saturation_gamma=0.0).advantages)


@pytest.mark.parametrize("seed", [0, 4])
def test_single_objective_is_grpo(seed):
    # K = 1: w = (1 − s)^γ/(1 − s)^γ = 1 → GRPO (with a learning signal on a mixed batch).
    inp = random_batch(seed, k=1)
    out = run(inp).advantages
    torch.testing.assert_close(out, run(inp, "grpo").advantages)
    assert out.abs().sum() > 0


def test_base_weights_override_reward_weights():
    inp = random_batch(5, k=2)
    inp.reward_weights = torch.tensor([1.0, 3.0])
    via_inputs = run(inp).advantages
    inp.reward_weights = None
    torch.testing.assert_close(run(inp, base_weights=[1.0, 3.0]).advantages, via_inputs)
    assert not torch.allclose(run(inp).advantages, via_inputs)


# --- invariances ------------------------------------------------------------------------------

def test_masked_tokens_are_zero_and_rows_permute():
    inp = random_batch(6, k=2)
    out = run(inp).advantages
    assert (out[~inp.mask] == 0).all()
    perm = torch.tensor([5, 0, 11, 3, 8, 1, 10, 2, 7, 4, 9, 6])
    permuted = AdvantageInputs(inp.rewards[perm], inp.mask[perm], inp.group_ids[perm] + 100)
    torch.testing.assert_close(run(permuted).advantages, out[perm])


# --- state ------------------------------------------------------------------------------------

def test_saturation_ema_state_and_resume():
    # β = 0.5. Batch 1: objective means (0.5, 0.5); batch 2: (1.0, 0.0) →
    # s = 0.5·(0.5, 0.5) + 0.5·(1.0, 0.0) = (0.75, 0.25).
    b1 = inputs([[1, 0], [0, 1]], [0, 0])
    b2 = inputs([[1, 0], [1, 0]], [0, 0])
    est = build("advantage", "sa_mrpo", saturation_ema=0.5)
    assert est.state_dict() == {}
    est(b1)
    state = est.state_dict()
    second = est(b2)
    assert float(second.metrics["saturation_0"]) == pytest.approx(0.75)
    assert float(second.metrics["saturation_1"]) == pytest.approx(0.25)
    resumed = build("advantage", "sa_mrpo", saturation_ema=0.5)
    resumed.load_state_dict(state)
    again = resumed(b2)
    assert float(again.metrics["saturation_0"]) == pytest.approx(0.75)
    fresh = build("advantage", "sa_mrpo", saturation_ema=0.5)(b2)
    assert float(fresh.metrics["saturation_0"]) == pytest.approx(1.0)  # no state: batch value
    no_ema = build("advantage", "sa_mrpo")
    no_ema(b1)
    assert no_ema.state_dict() == {}  # stateless with the EMA off


# --- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("params, match", [
    ({"saturation_gamma": -1.0}, "saturation_gamma"),
    ({"saturation_ema": 1.0}, "saturation_ema"),
    ({"base_weights": [1.0, -1.0]}, "base_weights"),
    ({"reward_bounds": [[1.0, 0.0]]}, "reward_bounds"),
])
def test_bad_config(params, match):
    with pytest.raises(ValueError, match=match):
        build("advantage", "sa_mrpo", **params)


def test_bad_inputs():
    inp = inputs([[1, 0], [0, 1]], [0, 0])
    with pytest.raises(BatchError, match="base_weights has 3 entries for K=2"):
        run(inp, base_weights=[1.0, 1.0, 1.0])
    with pytest.raises(BatchError, match="reward_bounds has 1 entries for K=2"):
        run(inp, reward_bounds=[[0, 1]])
    with pytest.raises(BatchError, match="objective 1 has rewards in .* outside its bounds"):
        run(inputs([[1, 0], [0, 2]], [0, 0]))
    inp.reward_weights = torch.tensor([1.0, -1.0])
    with pytest.raises(BatchError, match="reward_weights must be >= 0"):
        run(inp)
