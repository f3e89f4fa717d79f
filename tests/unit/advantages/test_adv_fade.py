"""FADE (docs/methods.md §2.29): golden values, the reduction to dr_grpo, sign-mass balance, the entropy
schedule and its state, invariances and errors. Every expected number is derived by hand in the
comment above it."""

from __future__ import annotations

import pytest
import torch

from rlvr import AdvantageInputs, build
from rlvr.advantages.fade import focal_weight, negative_weight
from rlvr.types import BatchError


def inputs(rewards, groups, entropy: float | None = None, mask=None, **kw) -> AdvantageInputs:
    r = torch.tensor(rewards, dtype=torch.float32).unsqueeze(1)
    m = torch.ones(r.shape[0], 2, dtype=torch.bool) if mask is None else torch.tensor(mask)
    ent = None if entropy is None else torch.full(m.shape, float(entropy))
    return AdvantageInputs(rewards=r, mask=m, group_ids=torch.tensor(groups), entropy=ent, **kw)


def run(inp: AdvantageInputs, name: str = "fade", **params):
    return build("advantage", name, **params)(inp)


def random_batch(seed: int, binary: bool = True) -> AdvantageInputs:
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(12, 1, generator=g)
    r = (r > 0.5).float() if binary else r
    mask = torch.rand(12, 4, generator=g) > 0.3
    mask[:, 0] = True
    return AdvantageInputs(r, mask, torch.tensor([2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1]),
                           entropy=torch.rand(12, 4, generator=g) + 0.5)


# --- golden values ----------------------------------------------------------------------------

def test_golden_half_explore():
    # entropy 1, target 2 → η = 0.5; γ = 1, λ_min = 0.3 → λ⁻ = 0.5 + 0.5·0.3 = 0.65.
    # Group 0 (rows 0, 2, 4, 6) r = (1,0,0,0): p = 0.25, Â = (0.75, −0.25 ×3);
    #   d = 0.5·0.75 + 0.5·(4·0.25·0.75 = 0.75) = 0.75 → A = (0.5625, −0.75·0.65·0.25 = −0.121875 ×3).
    # Group 1 (rows 1, 3, 5, 7) r = (1,1,0,0): p = 0.5, Â = ±0.5;
    #   d = 0.5·0.5 + 0.5·1 = 0.75 → A = (0.375, 0.375, −0.75·0.65·0.5 = −0.24375 ×2).
    # pos_mass = (0.5625 + 0.75)/8 = 0.1640625; neg_mass = (3·0.121875 + 2·0.24375)/8 = 0.10664063.
    inp = inputs([1, 1, 0, 1, 0, 0, 0, 0], [0, 1, 0, 1, 0, 1, 0, 1], entropy=1.0)
    out = run(inp, entropy_target=2.0)
    expected = torch.tensor([0.5625, 0.375, -0.121875, 0.375, -0.121875, -0.24375, -0.121875, -0.24375])
    torch.testing.assert_close(out.advantages[:, 0], expected)
    torch.testing.assert_close(out.advantages[:, 1], expected)  # every trained token of the row
    assert float(out.metrics["eta"]) == pytest.approx(0.5)
    assert float(out.metrics["lambda_neg"]) == pytest.approx(0.65)
    assert float(out.metrics["pos_mass"]) == pytest.approx(0.1640625)
    assert float(out.metrics["neg_mass"]) == pytest.approx(0.10664063)


def test_golden_full_exploit_medium_focus():
    # entropy 0 → η = 0: d = (4p(1 − p))^γ, λ⁻ = λ_min. γ = 2, p = 0.25: d = 0.75² = 0.5625;
    # A = (0.5625·0.75, −0.5625·0.3·0.25 ×3) = (0.421875, −0.0421875 ×3).
    out = run(inputs([1, 0, 0, 0], [0, 0, 0, 0], entropy=0.0), entropy_target=1.0, focal_gamma=2.0)
    torch.testing.assert_close(out.advantages[:, 0], torch.tensor([0.421875, -0.0421875, -0.0421875, -0.0421875]))


def test_focal_and_negative_weight_helpers():
    # η = 1: d = (1 − p)^γ — p = 0.75, γ = 2 → 0.0625; η = 0: (4·0.75·0.25)^2 = 0.5625.
    p = torch.tensor([0.75])
    assert float(focal_weight(p, 1.0, 2.0)) == pytest.approx(0.0625)
    assert float(focal_weight(p, 0.0, 2.0)) == pytest.approx(0.5625)
    assert negative_weight(1.0, 0.3) == 1.0 and negative_weight(0.0, 0.3) == pytest.approx(0.3)


# --- reductions -------------------------------------------------------------------------------

@pytest.mark.parametrize("binary", [True, False])
def test_gamma_zero_full_explore_is_dr_grpo(binary):
    # γ = 0 → d = η + (1 − η) = 1; η = 1 → λ⁻ = 1: A = Â (Dr. GRPO). The entropy (0.5–1.5) is
    # above the target 0.1, so η clips to 1.
    inp = random_batch(0, binary)
    out = run(inp, focal_gamma=0.0, entropy_target=0.1)
    assert float(out.metrics["eta"]) == 1.0
    torch.testing.assert_close(out.advantages, run(inp, "dr_grpo").advantages)


@pytest.mark.parametrize("binary", [True, False])
def test_masses_balance_with_equal_sign_weights(binary):
    # Â sums to 0 in each group and d is constant in a group, so with λ⁻ = λ⁺ (η = 1) M⁺ = M⁻;
    # with η < 1 the negative mass is exactly λ⁻ times the positive one.
    inp = random_batch(1, binary)
    first = run(inp)  # first batch sets H_target → η = 1
    assert float(first.metrics["eta"]) == 1.0
    assert float(first.metrics["pos_mass"]) > 0
    assert float(first.metrics["pos_mass"]) == pytest.approx(float(first.metrics["neg_mass"]), rel=1e-5)
    half = run(inp, entropy_target=2 * float(first.metrics["entropy"]))
    assert float(half.metrics["neg_mass"]) == pytest.approx(0.65 * float(half.metrics["pos_mass"]), rel=1e-5)


def test_negative_weight_non_decreasing_in_eta():
    for lam in (0.0, 0.3, 1.0):
        values = [negative_weight(i / 20, lam) for i in range(21)]
        assert all(b >= a for a, b in zip(values, values[1:]))
        assert values[0] == pytest.approx(lam) and values[-1] == pytest.approx(1.0)


# --- the entropy schedule and its state -------------------------------------------------------

def test_first_batch_sets_target_and_later_batches_read_it():
    # Batch 1 entropy 2.0 → H_target = 2, η = 1. Batch 2 entropy 0.5 → η = 0.25,
    # λ⁻ = 0.25 + 0.75·0.3 = 0.475. Batch 3 entropy 3.0 → η clips to 1.
    est = build("advantage", "fade")
    assert est.state_dict() == {}
    r, g = [1, 0, 0, 0], [0, 0, 0, 0]
    assert float(est(inputs(r, g, entropy=2.0)).metrics["eta"]) == 1.0
    assert est.state_dict() == {"entropy_target": 2.0}
    second = est(inputs(r, g, entropy=0.5))
    assert float(second.metrics["eta"]) == pytest.approx(0.25)
    assert float(second.metrics["lambda_neg"]) == pytest.approx(0.475)
    assert float(est(inputs(r, g, entropy=3.0)).metrics["eta"]) == 1.0
    assert est.state_dict() == {"entropy_target": 2.0}  # the target is read once


def test_state_round_trip_resumes_the_schedule():
    est = build("advantage", "fade")
    est(inputs([1, 0], [0, 0], entropy=2.0))
    later = inputs([1, 0, 0, 0], [0, 0, 0, 0], entropy=0.5)
    resumed = build("advantage", "fade")
    resumed.load_state_dict(est.state_dict())
    torch.testing.assert_close(resumed(later).advantages, est(later).advantages)
    fresh = build("advantage", "fade")(later)  # without the state the schedule restarts at η = 1
    assert float(fresh.metrics["eta"]) == 1.0
    assert not torch.allclose(fresh.advantages, est(later).advantages)


def test_entropy_from_logprobs_ignores_masked_tokens():
    # logprobs on trained tokens: −1, −3 → H̄ = 2; the masked token's −100 must not count.
    # entropy_target 4 → η = 0.5. Given `entropy` wins over logprobs.
    mask = torch.tensor([[True, True, False], [True, False, False]])
    logp = torch.tensor([[-1.0, -3.0, -100.0], [-2.0, -100.0, -100.0]])
    inp = AdvantageInputs(torch.tensor([[1.0], [0.0]]), mask, torch.tensor([0, 0]), logprobs=logp)
    out = run(inp, entropy_target=4.0)
    assert float(out.metrics["entropy"]) == pytest.approx(2.0)
    assert float(out.metrics["eta"]) == pytest.approx(0.5)
    inp.entropy = torch.full((2, 3), 4.0)
    assert float(run(inp, entropy_target=4.0).metrics["eta"]) == 1.0


# --- invariances ------------------------------------------------------------------------------

def test_masked_tokens_are_zero_and_rows_permute():
    inp = random_batch(2)
    out = run(inp, entropy_target=2.0).advantages
    assert (out[~inp.mask] == 0).all() and out.abs().sum() > 0
    perm = torch.tensor([4, 9, 0, 11, 2, 7, 1, 10, 3, 8, 6, 5])
    permuted = AdvantageInputs(inp.rewards[perm], inp.mask[perm], inp.group_ids[perm] - 5, entropy=inp.entropy[perm])
    torch.testing.assert_close(run(permuted, entropy_target=2.0).advantages, out[perm])


# --- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("params, match", [
    ({"focal_gamma": -1.0}, "focal_gamma"),
    ({"lambda_min": 1.5}, "lambda_min"),
    ({"entropy_target": -1.0}, "entropy_target"),
    ({"eta_map": "sigmoid"}, "eta_map"),
])
def test_bad_config(params, match):
    with pytest.raises(ValueError, match=match):
        build("advantage", "fade", **params)


def test_bad_inputs():
    with pytest.raises(BatchError, match="needs AdvantageInputs.entropy or AdvantageInputs.logprobs"):
        run(inputs([1, 0], [0, 0]))
    with pytest.raises(BatchError, match=r"rewards must lie in \[0, 1\]"):
        run(inputs([1.5, 0], [0, 0], entropy=1.0))
