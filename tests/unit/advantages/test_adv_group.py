"""Golden values and reductions for the group-baseline estimators: grpo, dr_grpo, rloo, gdpo,
reinforce_pp_baseline. Every expected number is derived by hand in the comment above it."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr import AdvantageInputs, build
from rlvr.ops import masked_whiten

R2 = math.sqrt(0.5)  # 0.70711


def inputs(scores, groups, mask=None, **kw) -> AdvantageInputs:
    r = torch.tensor(scores, dtype=torch.float32)
    r = r.unsqueeze(1) if r.dim() == 1 else r
    m = torch.ones(r.shape[0], 1, dtype=torch.bool) if mask is None else torch.tensor(mask)
    return AdvantageInputs(rewards=r, mask=m, group_ids=torch.tensor(groups), **kw)


def adv(name: str, inp: AdvantageInputs, **params) -> torch.Tensor:
    return build("advantage", name, **params)(inp).advantages


# --- grpo / dr_grpo ---------------------------------------------------------------------------

def test_grpo_two_rows_golden():
    # docs/methods.md §1.1: G=2, r=(1,0): mean 0.5, unbiased sd = sqrt((0.25+0.25)/1) = 0.70711,
    # A = ±0.5/(0.70711 + 1e-6) = ±0.70711.
    out = adv("grpo", inputs([1.0, 0.0], [0, 0]))
    torch.testing.assert_close(out[:, 0], torch.tensor([R2, -R2]), atol=1e-5, rtol=0)


def test_grpo_population_std_golden():
    # ddof=0: population sd of (1,0) = 0.5, A = ±0.5/0.5 = ±1.
    out = adv("grpo", inputs([1.0, 0.0], [0, 0]), ddof=0)
    torch.testing.assert_close(out[:, 0], torch.tensor([1.0, -1.0]), atol=1e-5, rtol=0)


def test_grpo_identical_rewards_give_zero():
    # sd 0, centred score 0 → 0/(0 + eps) = 0 for every row.
    out = adv("grpo", inputs([0.3, 0.3, 0.3], [4, 4, 4]))
    assert torch.equal(out, torch.zeros(3, 1))


def test_grpo_singleton_conventions():
    # verl ('raw'): a group of one uses mean 0, sd 1 → A = 0.7/(1 + 1e-6); 'zero' → A = 0.
    raw = adv("grpo", inputs([0.7], [0]))
    assert raw.item() == pytest.approx(0.7 / (1 + 1e-6), abs=1e-7)
    assert adv("grpo", inputs([0.7], [0]), singleton="zero").item() == 0.0


def test_grpo_batch_scale_golden():
    # r=(1,0,1,1), groups (0,0,1,1): centred (0.5,−0.5,0,0); batch sd of the raw scores:
    # mean 0.75, squares 3·0.0625+0.5625 = 0.75, /3 = 0.25, sd 0.5 → A = (1, −1, 0, 0).
    out = adv("grpo", inputs([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1]), scale="batch")
    torch.testing.assert_close(out[:, 0], torch.tensor([1.0, -1.0, 0.0, 0.0]), atol=1e-5, rtol=0)


def test_dr_grpo_equals_grpo_without_scale():
    inp = inputs([1.0, 0.0, 0.25, 2.0, -1.0, 0.5], [3, 3, 3, 8, 8, 1])
    assert torch.equal(adv("dr_grpo", inp), adv("grpo", inp, scale="none"))
    # and it is the centred score: group 3 mean 0.41667 → 1 − 0.41667 = 0.58333.
    assert adv("dr_grpo", inp)[0, 0].item() == pytest.approx(1 - 1.25 / 3, abs=1e-6)


def test_grpo_ignores_other_objectives_without_weights():
    # Without reward_weights the scalar is objective 0 alone (AdvantageInputs.scalar_rewards).
    a = adv("grpo", inputs([[1.0, 5.0], [0.0, -3.0]], [0, 0]))
    b = adv("grpo", inputs([[1.0, 0.0], [0.0, 0.0]], [0, 0]))
    assert torch.equal(a, b)


# --- rloo -------------------------------------------------------------------------------------

def test_rloo_golden():
    # G=3, r=(1,0,0): A_0 = 1 − (0+0)/2 = 1; A_1 = 0 − (1+0)/2 = −0.5; A_2 = −0.5.
    out = adv("rloo", inputs([1.0, 0.0, 0.0], [2, 2, 2]))
    torch.testing.assert_close(out[:, 0], torch.tensor([1.0, -0.5, -0.5]), atol=1e-6, rtol=0)


def test_rloo_is_rescaled_dr_grpo():
    # s_i − mean_{j≠i} s_j = G/(G−1)·(s_i − mean_g s): RLOO = G/(G−1) × Dr. GRPO for every group size.
    inp = inputs([1.0, 0.0, 0.5, 2.0, -1.0], [0, 0, 0, 1, 1])
    scale = torch.tensor([1.5, 1.5, 1.5, 2.0, 2.0]).unsqueeze(1)
    torch.testing.assert_close(adv("rloo", inp), adv("dr_grpo", inp) * scale)


def test_rloo_singleton_conventions():
    # verl: a lone row has no others; it keeps its raw score (A = 0.7). TRL: 0.
    assert adv("rloo", inputs([0.7], [0])).item() == pytest.approx(0.7)
    assert adv("rloo", inputs([0.7], [0]), singleton="zero").item() == 0.0


# --- reinforce_pp_baseline ----------------------------------------------------------------------

def test_reinforce_pp_baseline_golden():
    # r=(1,0,1,1), groups (0,0,1,1), one token each: centred (0.5,−0.5,0,0); batch whitening:
    # mean 0, unbiased var = 0.5/3 = 1/6 → A = ±0.5·sqrt(6) = ±1.22474, 0, 0.
    out = adv("reinforce_pp_baseline", inputs([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1]))
    a = 0.5 * math.sqrt(6)
    torch.testing.assert_close(out[:, 0], torch.tensor([a, -a, 0.0, 0.0]), atol=1e-5, rtol=0)


# --- gdpo -------------------------------------------------------------------------------------

def test_gdpo_decoupled_objectives_cancel():
    # Rows r = [[1,0],[0,2]], one group. Objective 0 (1,0) → (+0.7071, −0.7071); objective 1 (0,2):
    # mean 1, sd sqrt(2) → (−0.7071, +0.7071). Equal weights: sum (0, 0). (Checked before the
    # whitening, which would blow the eps-sized remainder up to ~1e-3: sqrt(var + 1e-8) ≈ 1e-4.)
    # GRPO on the summed reward (1, 2) gives (−0.7071, +0.7071): the large objective wins.
    inp = inputs([[1.0, 0.0], [0.0, 2.0]], [0, 0], reward_weights=torch.ones(2))
    torch.testing.assert_close(adv("gdpo", inp, whiten="none"), torch.zeros(2, 1), atol=1e-6, rtol=0)
    torch.testing.assert_close(adv("grpo", inp)[:, 0], torch.tensor([-R2, R2]), atol=1e-5, rtol=0)


def test_gdpo_weights_golden():
    # Same rows, weights (2,1): sum = 2·(0.7071, −0.7071) + (−0.7071, 0.7071) = (0.7071, −0.7071);
    # whitening over the two tokens: mean 0, unbiased var = 2·0.5/1 = 1 → A = (0.7071, −0.7071).
    inp = inputs([[1.0, 0.0], [0.0, 2.0]], [0, 0], reward_weights=torch.tensor([2.0, 1.0]))
    torch.testing.assert_close(adv("gdpo", inp)[:, 0], torch.tensor([R2, -R2]), atol=1e-5, rtol=0)


def test_gdpo_token_whitening_golden():
    # K=1, r=(1,0), row 0 has 2 trained tokens, row 1 has 1. GRPO: (a, −a), a = 0.7071.
    # Tokens (a, a, −a): mean a/3, deviations (2a/3, 2a/3, −4a/3), squares sum 24a²/9 = 4/3,
    # unbiased var 2/3 → A = (1/√3, 1/√3 | −2/√3) = (0.57735, 0.57735 | −1.15470).
    # 'sequences' (TRL-style): rows (a, −a), mean 0, unbiased sd 1 → (a, a | −a).
    inp = inputs([1.0, 0.0], [0, 0], mask=[[True, True], [True, False]])
    s3 = 1 / math.sqrt(3)
    torch.testing.assert_close(adv("gdpo", inp), torch.tensor([[s3, s3], [-2 * s3, 0.0]]), atol=1e-5, rtol=0)
    seq = adv("gdpo", inp, whiten="sequences", whiten_eps=0.0)
    torch.testing.assert_close(seq, torch.tensor([[R2, R2], [-R2, 0.0]]), atol=1e-5, rtol=0)


def test_gdpo_single_objective_is_grpo_then_whitening():
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(7, 5, generator=g) > 0.3
    mask[:, 0] = True
    inp = AdvantageInputs(torch.randn(7, 1, generator=g), mask, torch.tensor([0, 1, 0, 2, 1, 1, 0]))
    expected = masked_whiten(adv("grpo", inp), mask) * mask
    torch.testing.assert_close(adv("gdpo", inp), expected)
    assert torch.equal(adv("gdpo", inp, whiten="none"), adv("grpo", inp))


def test_gdpo_without_std_is_dr_grpo_per_objective():
    # norm_by_std=False, whiten='none': Σ_k w_k (r_k − mean_g r_k) = Dr. GRPO of the weighted sum.
    w = torch.tensor([1.0, 3.0])
    inp = inputs([[1.0, 0.0], [0.0, 2.0], [0.5, 0.5]], [0, 0, 0], reward_weights=w)
    torch.testing.assert_close(adv("gdpo", inp, norm_by_std=False, whiten="none"), adv("dr_grpo", inp))
