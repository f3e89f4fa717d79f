"""Per-token KL estimators (rlvr.ops.kl_estimate): golden values, clamps, straight-through."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.ops import KL_ESTIMATORS, kl_estimate

# d = log π − log π_ref = [1, −1]
LOGP = torch.tensor([-1.0, -2.0])
REF = torch.tensor([-2.0, -1.0])


@pytest.mark.parametrize("kind, expected", [
    ("k1", [1.0, -1.0]),  # d
    ("k2", [0.5, 0.5]),  # ½ d²
    ("abs", [1.0, 1.0]),  # |d|
    # k3 = e^{−d} + d − 1: d = 1 → e^{−1} = 0.367879; d = −1 → e − 2 = 0.718282
    ("k3", [math.exp(-1.0), math.e - 2.0]),
])
def test_golden_values(kind, expected):
    assert kl_estimate(LOGP, REF, kind).tolist() == pytest.approx(expected, rel=1e-6)


def test_k3_is_nonnegative_and_zero_on_policy():
    g = torch.Generator().manual_seed(0)
    logp, ref = torch.randn(50, generator=g), torch.randn(50, generator=g)
    assert (kl_estimate(logp, ref, "k3") >= 0).all()
    assert kl_estimate(logp, logp, "k3").abs().max() == 0


def test_k3_clamps():
    logp = torch.tensor([15.0, 30.0])
    ref = torch.zeros(2)
    # d = log π − log π_ref = 15, 30 → log-ratio −d = −15, −30 (the latter clamped to −20):
    # k3 = e^{−15} + 15 − 1 = 14.0000003 and e^{−20} + 20 − 1 = 19; the default clamp gives 10, 10.
    assert kl_estimate(logp, ref, "k3").tolist() == pytest.approx([10.0, 10.0])
    assert kl_estimate(logp, ref, "k3", clamp=None).tolist() == pytest.approx(
        [math.exp(-15) + 14.0, math.exp(-20) + 19.0], rel=1e-6)
    # log-ratio +25 is clamped to +20 before exp: e^{20} − 20 − 1 (no clamp on the result)
    big = kl_estimate(torch.tensor([0.0]), torch.tensor([25.0]), "k3", clamp=None)
    assert big.item() == pytest.approx(math.exp(20) - 21.0, rel=1e-5)


@pytest.mark.parametrize("kind", ["k1", "k3", "abs"])
def test_straight_through_forward_is_estimator_gradient_is_k2(kind):
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(6, generator=g)
    logp = torch.randn(6, generator=g).requires_grad_(True)
    plain = kl_estimate(logp, ref, kind)
    st = kl_estimate(logp, ref, kind, straight_through=True)
    assert torch.allclose(st, plain)
    (grad_st,) = torch.autograd.grad(st.sum(), logp)
    (grad_plain,) = torch.autograd.grad(plain.sum(), logp)
    # ∂(½ d²)/∂log π = d
    assert torch.allclose(grad_st, (logp - ref).detach())
    assert not torch.allclose(grad_plain, grad_st)  # the trick changes the gradient


def test_straight_through_k2_is_plain_k2():
    logp = torch.tensor([0.3, -0.2], requires_grad=True)
    ref = torch.tensor([0.0, 0.1])
    assert torch.equal(kl_estimate(logp, ref, "k2", straight_through=True), kl_estimate(logp, ref, "k2"))


def test_k3_gradient_golden():
    # ∂k3/∂log π = 1 − e^{−d}: d = 1 → 1 − e^{−1} = 0.632121; d = −1 → 1 − e = −1.718282
    logp = LOGP.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(kl_estimate(logp, REF, "k3").sum(), logp)
    assert grad.tolist() == pytest.approx([1 - math.exp(-1), 1 - math.e], rel=1e-6)


def test_unknown_estimator():
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3", "abs"}
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        kl_estimate(LOGP, REF, "k4")
