"""ppo_clip: golden values, clip-higher, dual clip, log-ratio clamp, reductions."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.aggregation import aggregate
from rlvr.losses.ppo_clip import PPOClip, PPOClipConfig
from rlvr.registry import RegistryError, build
from rlvr.types import LossInputs

# One row of four tokens, π_old = 1 (log 0), ratios ρ = [1.5, 0.5, 0.5, 5], A = [+1, +1, −1, −1].
RATIO = torch.tensor([[1.5, 0.5, 0.5, 5.0]])
ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
MASK = torch.ones(1, 4, dtype=torch.bool)


def _inputs(ratio=RATIO, adv=ADV, mask=MASK, old=None):
    old = torch.zeros_like(ratio) if old is None else old
    logp = (old + ratio.log()).clone().requires_grad_(True)
    return LossInputs(logprobs=logp, old_logprobs=old, advantages=adv, mask=mask)


def _loss_and_grad(loss_fn, inputs):
    out = loss_fn(inputs)
    (grad,) = torch.autograd.grad(out.per_token.sum(), inputs.logprobs)
    return out, grad


def test_golden_clip_higher_and_dual_clip():
    # eps_low 0.2, eps_high 0.28 (DAPO), dual clip c = 3:
    #  t0 A=+1 ρ=1.5: max(−1.5, −1.28) = −1.28 (clipped high, no gradient)
    #  t1 A=+1 ρ=0.5: max(−0.5, −0.8)  = −0.5  (unclipped: the pessimistic term is the ratio)
    #  t2 A=−1 ρ=0.5: max(0.5, 0.8)    = 0.8   (clipped low, no gradient)
    #  t3 A=−1 ρ=5:   max(5, 1.28) = 5, dual: min(5, −c·A = 3) = 3 (dual clip binds, no gradient)
    loss = PPOClip(PPOClipConfig(eps_low=0.2, eps_high=0.28, clip_ratio_c=3.0))
    out, grad = _loss_and_grad(loss, _inputs())
    assert out.per_token.tolist()[0] == pytest.approx([-1.28, -0.5, 0.8, 3.0], rel=1e-6)
    # ∂ℓ/∂log π = −A·ρ where the ratio term is active: only t1 → −0.5
    assert grad.tolist()[0] == pytest.approx([0.0, -0.5, 0.0, 0.0], abs=1e-6)
    # clipfrac: clipped term strictly larger at t0 and t2 → 2/4; dual clip binds at t3 → 1/4
    assert out.metrics["clipfrac"].item() == pytest.approx(0.5)
    assert out.metrics["clipfrac_lower"].item() == pytest.approx(0.25)
    # approx_kl = mean(log π_old − log π) = −log(1.5·0.5·0.5·5)/4 = −log(1.875)/4 = −0.157152
    assert out.metrics["approx_kl"].item() == pytest.approx(-math.log(1.875) / 4, rel=1e-5)
    assert all(not v.requires_grad for v in out.metrics.values())


def test_golden_no_dual_clip():
    # Without the dual clip t3 keeps ℓ = −A·ρ = 5 and its gradient −A·ρ = 5.
    out, grad = _loss_and_grad(PPOClip(PPOClipConfig(eps_high=0.28)), _inputs())
    assert out.per_token.tolist()[0] == pytest.approx([-1.28, -0.5, 0.8, 5.0], rel=1e-6)
    assert grad.tolist()[0] == pytest.approx([0.0, -0.5, 0.0, 5.0], abs=1e-6)
    assert "clipfrac_lower" not in out.metrics


def test_symmetric_clip_equals_textbook_formula():
    g = torch.Generator().manual_seed(0)
    ratio = torch.exp(0.5 * torch.randn(4, 5, generator=g))
    adv = torch.randn(4, 5, generator=g)
    mask = torch.ones(4, 5, dtype=torch.bool)
    out = PPOClip(PPOClipConfig(eps_low=0.2, eps_high=0.2))(_inputs(ratio, adv, mask))
    textbook = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)  # Schulman et al. eq. 7
    assert torch.allclose(out.per_token, textbook, rtol=1e-6)
    # clip-higher changes the loss of a token with A > 0 and ρ in (1.2, 1.28)
    one = _inputs(torch.tensor([[1.25]]), torch.tensor([[1.0]]), torch.ones(1, 1, dtype=torch.bool))
    assert PPOClip(PPOClipConfig(eps_high=0.28))(one).per_token.item() == pytest.approx(-1.25)
    assert PPOClip()(one).per_token.item() == pytest.approx(-1.2)


def test_dual_clip_only_acts_on_negative_advantages():
    # A = +1 with ρ = 5 is already clipped to −1.2; the dual clip leaves it alone.
    inputs = _inputs(torch.tensor([[5.0]]), torch.tensor([[1.0]]), torch.ones(1, 1, dtype=torch.bool))
    assert PPOClip(PPOClipConfig(clip_ratio_c=3.0))(inputs).per_token.item() == pytest.approx(-1.2)


def test_on_policy_gradient_is_reinforce():
    # logp == old_logp → ρ = 1 inside every clip range → ∂ℓ/∂log π = −A per token
    g = torch.Generator().manual_seed(1)
    old = torch.randn(3, 4, generator=g)
    adv = torch.randn(3, 4, generator=g)
    inputs = _inputs(torch.ones(3, 4), adv, torch.ones(3, 4, dtype=torch.bool), old=old)
    out, grad = _loss_and_grad(PPOClip(PPOClipConfig(eps_high=0.28, clip_ratio_c=3.0)), inputs)
    assert torch.allclose(grad, -adv, rtol=1e-6)
    assert torch.allclose(out.per_token, -adv, rtol=1e-6)


def test_log_ratio_clamp():
    # log-ratio 25 is clamped to 20: ℓ = −A·e^20 for A = −1 (no dual clip); unclamped e^25.
    inputs = _inputs(torch.tensor([[math.exp(25.0)]]), torch.tensor([[-1.0]]), torch.ones(1, 1, dtype=torch.bool))
    assert PPOClip()(inputs).per_token.item() == pytest.approx(math.exp(20.0), rel=1e-5)
    assert PPOClip(PPOClipConfig(log_ratio_clamp=None))(inputs).per_token.item() == pytest.approx(
        math.exp(25.0), rel=1e-4)


def test_masked_positions_do_not_leak_into_the_gradient():
    mask = torch.tensor([[True, True, False, False]])
    logp = torch.tensor([[0.1, -0.2, 1e30, float("nan")]], requires_grad=True)
    inputs = LossInputs(logprobs=logp, old_logprobs=torch.zeros(1, 4), advantages=ADV, mask=mask)
    value = aggregate(PPOClip()(inputs).per_token, mask, "token-mean")
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(logp.grad).all()
    assert logp.grad[0, 2:].abs().sum() == 0


def test_registry_build_and_config_errors():
    loss = build("loss", "ppo_clip", eps_high=0.28, clip_ratio_c=3.0)
    assert isinstance(loss, PPOClip) and loss.config.eps_high == 0.28
    with pytest.raises(RegistryError, match="eps_hi"):
        build("loss", "ppo_clip", eps_hi=0.3)
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        PPOClipConfig(clip_ratio_c=0.5)
    with pytest.raises(ValueError, match="eps_low"):
        PPOClipConfig(eps_low=1.5)
