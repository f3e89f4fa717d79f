"""dppo_tv / dppo_kl: the docs/methods.md §1.5 trust-region toy, golden values, reductions."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.losses.dppo import DPPOBinaryKL, DPPOBinaryTV, DPPOConfig, DPPOKLConfig
from rlvr.types import LossInputs

# docs/methods.md §1.5 toy: p_old = [.9, .9, .05, .05], p = [.95, .75, .35, .01], A = [+, −, +, −], δ = 0.2
P_OLD = torch.tensor([[0.9, 0.9, 0.05, 0.05]])
P = torch.tensor([[0.95, 0.75, 0.35, 0.01]])
ADV = torch.tensor([[1.0, -1.0, 1.0, -1.0]])


def _inputs(p=P, p_old=P_OLD, adv=ADV):
    logp = p.log().clone().requires_grad_(True)
    return LossInputs(logprobs=logp, old_logprobs=p_old.log(), advantages=adv,
                      mask=torch.ones_like(p, dtype=torch.bool))


def _grad(out, inputs):
    (grad,) = torch.autograd.grad(out.per_token.sum(), inputs.logprobs)
    return grad


@pytest.mark.parametrize("loss_cls", [DPPOBinaryTV, DPPOBinaryKL])
def test_methods_toy_valid_mask(loss_cls):
    # TV: p − p_old = [.05, −.15, .30, −.04]; A>0 needs ≤ .2, A<0 needs ≥ −.2 → valid [T, T, F, T].
    # KL: bkl = [.0207, .0725, .2632, .0413]; t2 raises p with bkl > .2 → invalid; others ≤ .2 → [T, T, F, T].
    inputs = _inputs()
    out = loss_cls()(inputs)
    grad = _grad(out, inputs)
    # gradient −A·ρ·valid, ρ = p/p_old = [1.05556, 0.83333, 7, 0.2] → [−1.05556, 0.83333, 0, 0.2]
    assert grad.tolist()[0] == pytest.approx([-0.95 / 0.9, 0.75 / 0.9, 0.0, 0.2], rel=1e-5, abs=1e-7)
    assert out.metrics["clipfrac"].item() == pytest.approx(0.25)
    # value (verl 0.9.1 form) −A·sg(min(ρ, 20))·log p·valid:
    # [−1.05556·ln .95, +0.83333·ln .75, 0, +0.2·ln .01] = [0.054143, −0.239735, 0, −0.921034]
    assert out.per_token.tolist()[0] == pytest.approx([0.054143, -0.239735, 0.0, -0.921034], abs=1e-5)


def test_ratio_surrogate_value():
    # golden_critic form −A·ρ·valid = [−1.05556, 0.83333, 0, 0.2]; same gradient as the default.
    inputs = _inputs()
    out = DPPOBinaryTV(DPPOConfig(surrogate="ratio"))(inputs)
    assert out.per_token.tolist()[0] == pytest.approx([-0.95 / 0.9, 0.75 / 0.9, 0.0, 0.2], rel=1e-5)
    default = _inputs()
    assert torch.allclose(_grad(out, inputs), _grad(DPPOBinaryTV()(default), default), rtol=1e-6)


def test_tv_and_kl_disagree_where_expected():
    # p_old = .5: lowering to .25 with A < 0 has TV .25 > .2 (dropped) but bkl = .1438 ≤ .2 (kept);
    # raising to .75 with A > 0 likewise: TV .25 (dropped), bkl = .1438 (kept).
    p_old = torch.tensor([[0.5, 0.5]])
    p = torch.tensor([[0.25, 0.75]])
    adv = torch.tensor([[-1.0, 1.0]])
    assert DPPOBinaryTV()(_inputs(p, p_old, adv)).metrics["clipfrac"].item() == pytest.approx(1.0)
    assert DPPOBinaryKL()(_inputs(p, p_old, adv)).metrics["clipfrac"].item() == pytest.approx(0.0)
    # and with δ = 0.1 < .1438 the KL region drops both
    tight = DPPOBinaryKL(DPPOKLConfig(delta_low=0.1, delta_high=0.1))
    assert tight(_inputs(p, p_old, adv)).metrics["clipfrac"].item() == pytest.approx(1.0)


def test_moving_against_the_advantage_is_always_valid_for_kl():
    # A > 0 but p fell a lot (.9 → .1): bkl is huge yet p ≤ p_old → valid; TV also keeps it (−.8 ≤ .2).
    inputs = _inputs(torch.tensor([[0.1]]), torch.tensor([[0.9]]), torch.tensor([[1.0]]))
    assert DPPOBinaryKL()(inputs).metrics["clipfrac"].item() == 0.0


@pytest.mark.parametrize("loss_cls, cfg_cls", [(DPPOBinaryTV, DPPOConfig), (DPPOBinaryKL, DPPOKLConfig)])
def test_huge_delta_equals_unclipped_policy_gradient(loss_cls, cfg_cls):
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 4, generator=g) * 3
    logp = (old + 0.5 * torch.randn(3, 4, generator=g)).clamp(max=-1e-3).requires_grad_(True)
    adv = torch.randn(3, 4, generator=g)
    inputs = LossInputs(logprobs=logp, old_logprobs=old, advantages=adv, mask=torch.ones(3, 4, dtype=torch.bool))
    ratio = (logp - old).exp()
    (want,) = torch.autograd.grad((-adv * ratio).sum(), logp)
    out = loss_cls(cfg_cls(delta_low=1e9, delta_high=1e9))(inputs)
    assert torch.allclose(_grad(out, inputs), want, rtol=1e-5)
    value = loss_cls(cfg_cls(delta_low=1e9, delta_high=1e9, surrogate="ratio"))(inputs).per_token
    assert torch.allclose(value, -adv * ratio, rtol=1e-6)
    assert out.metrics["clipfrac"].item() == 0.0


def test_truncated_importance_weight():
    # log p_old = −10, log p = −6: ρ = e^4 = 54.6 > C = 20 (TV +.0025 is valid) → gradient −A·C = −20 for A = 1
    p_old = torch.tensor([[math.exp(-10.0)]])
    p = torch.tensor([[math.exp(-6.0)]])
    inputs = _inputs(p, p_old, torch.tensor([[1.0]]))
    out = DPPOBinaryTV()(inputs)
    assert _grad(out, inputs).item() == pytest.approx(-20.0, rel=1e-6)
    assert out.metrics["clipfrac_lower"].item() == 1.0
    assert _grad(DPPOBinaryTV(DPPOConfig(clip_ratio_c=100.0))(inputs), inputs).item() == pytest.approx(
        -math.exp(4.0), rel=1e-5)


def test_config_errors():
    with pytest.raises(ValueError, match="surrogate"):
        DPPOConfig(surrogate="clip")
    with pytest.raises(ValueError, match="deltas"):
        DPPOConfig(delta_low=-0.1)
