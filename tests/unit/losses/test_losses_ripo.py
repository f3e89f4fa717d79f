"""ripo: the Fisher–Rao ratio range, golden values of both modes, the low/high-p contrast with ppo_clip,
and the large-δ reduction to the unclipped surrogate −A·ρ."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.losses.ppo_clip import PPOClip
from rlvr.losses.ripo import RIPO, RIPOConfig, ratio_bounds
from rlvr.registry import build
from rlvr.types import LossInputs

# Five tokens (p_old → p, ratio ρ = p/p_old, A), δ = 0.2, θ = arcsin √p:
#  t0 0.5 → 0.55  ρ 1.1  A +1: θ0 = π/4 = 0.785398, θ = 0.835482, d_FR = 2|Δθ| = 0.100167 ≤ 0.2 → inside
#  t1 0.5 → 0.65  ρ 1.3  A +1: θ = 0.937744, d_FR = 0.304693 > 0.2 → outside (hi = 1 + sin 0.2 = 1.198669)
#  t2 0.01 → 0.015 ρ 1.5 A +1: θ0 = 0.100167, θ = 0.122783, d_FR = 0.045231 → inside (hi = 3.953473)
#  t3 0.9 → 0.99  ρ 1.1  A −1: θ0 = 1.249046, θ = 1.470629, d_FR = 0.443166 → outside (hi = 1.057364)
#  t4 0.9 → 0.81  ρ 0.9  A −1: θ = 1.119770, d_FR = 0.258553 → outside (lo = 0.924918)
OLD_P = torch.tensor([[0.5, 0.5, 0.01, 0.9, 0.9]], dtype=torch.float64)
NEW_P = torch.tensor([[0.55, 0.65, 0.015, 0.99, 0.81]], dtype=torch.float64)
ADV = torch.tensor([[1.0, 1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)


def _inputs(old_p=OLD_P, new_p=NEW_P, adv=ADV):
    logp = new_p.log().clone().requires_grad_(True)
    return LossInputs(logprobs=logp, old_logprobs=old_p.log(), advantages=adv,
                      mask=torch.ones_like(adv, dtype=torch.bool))


def _loss_and_grad(loss_fn, inputs):
    out = loss_fn(inputs)
    (grad,) = torch.autograd.grad(out.per_token.sum(), inputs.logprobs)
    return out, grad


def test_ratio_bounds_match_the_methods_table():
    # docs/methods.md §2.25 (d), δ = 0.1: lo, hi = sin²(θ0 ∓ 0.05)/p0, angles clamped to [0, π/2].
    # p0 = 0.5: θ0 = π/4, sin²(π/4 ± x) = (1 ± sin 2x)/2 → exactly 1 ± sin 0.1.
    # p0 = 0.001: θ0 = 0.031628 < 0.05 → lo = 0; hi = sin²(0.081628)/0.001 = 6.648.
    old_p = torch.tensor([0.001, 0.01, 0.1, 0.5, 0.9], dtype=torch.float64)
    lo, hi = ratio_bounds(old_p.log(), 0.1)
    assert lo.tolist() == pytest.approx([0.0, 0.25, 0.72, 0.90, 0.96], abs=5e-3)
    assert hi.tolist() == pytest.approx([6.65, 2.24, 1.32, 1.10, 1.03], abs=5e-3)
    assert lo[3].item() == pytest.approx(1 - math.sin(0.1), rel=1e-12)
    assert hi[3].item() == pytest.approx(1 + math.sin(0.1), rel=1e-12)
    assert lo[0].item() == 0.0
    # symmetric in arcsin space: both bounds sit δ/2 from θ0 (where unclamped)
    theta0 = torch.arcsin(old_p.sqrt())
    assert torch.allclose(torch.arcsin((hi * old_p).sqrt()) - theta0, torch.full_like(theta0, 0.05))
    assert torch.allclose((theta0 - torch.arcsin((lo * old_p).sqrt()))[1:], torch.full((4,), 0.05,
                                                                                       dtype=torch.float64))


def test_golden_masked_both_sides():
    # valid = [T, F, T, F, F]; ℓ = −A·ρ·valid = [−1.1, 0, −1.5, 0, 0]; ∂ℓ/∂log π = −A·ρ·valid (same numbers)
    out, grad = _loss_and_grad(RIPO(), _inputs())
    assert out.per_token.tolist()[0] == pytest.approx([-1.1, 0.0, -1.5, 0.0, 0.0], rel=1e-12)
    assert grad.tolist()[0] == pytest.approx([-1.1, 0.0, -1.5, 0.0, 0.0], rel=1e-12)
    assert out.metrics["clipfrac"].item() == pytest.approx(3 / 5)
    assert out.metrics["fr_dist_mean"].item() == pytest.approx(
        (0.100167 + 0.304693 + 0.045231 + 0.443166 + 0.258553) / 5, abs=1e-5)


def test_golden_masked_advantage_side():
    # Only the move A favours is bounded: t3 (A < 0, p went *up*) and t4 (A < 0, p went down by 0.2586 > δ)
    # → t3 valid (moving against A is never dropped): ℓ = −A·ρ = 1.1; t4 still dropped.
    out, grad = _loss_and_grad(RIPO(RIPOConfig(mask_sides="advantage")), _inputs())
    assert out.per_token.tolist()[0] == pytest.approx([-1.1, 0.0, -1.5, 1.1, 0.0], rel=1e-12)
    assert grad.tolist()[0] == pytest.approx([-1.1, 0.0, -1.5, 1.1, 0.0], rel=1e-12)


def test_golden_clip_mode():
    # ℓ = max(−A·ρ, −A·clip(ρ, lo, hi)) with the δ = 0.2 bounds above:
    #  t0 ρ 1.1 ∈ [0.80, 1.20]      → −1.1, grad −1.1
    #  t1 ρ 1.3 > hi = 1.198669     → max(−1.3, −1.198669) = −1.198669, grad 0
    #  t2 ρ 1.5 ∈ [2.8e-6, 3.95]    → −1.5, grad −1.5
    #  t3 ρ 1.1 > hi = 1.057364, A < 0 → max(1.1, 1.057364) = 1.1 (pessimistic term unclipped), grad 1.1
    #  t4 ρ 0.9 < lo = 0.924918, A < 0 → max(0.9, 0.924918) = 0.924918, grad 0
    hi_half = 1 + math.sin(0.2)
    lo_high_p = math.sin(math.asin(math.sqrt(0.9)) - 0.1) ** 2 / 0.9
    out, grad = _loss_and_grad(RIPO(RIPOConfig(ripo_mode="clip")), _inputs())
    assert out.per_token.tolist()[0] == pytest.approx([-1.1, -hi_half, -1.5, 1.1, lo_high_p], rel=1e-12)
    assert lo_high_p == pytest.approx(0.924918, abs=1e-6)
    assert grad.tolist()[0] == pytest.approx([-1.1, 0.0, -1.5, 1.1, 0.0], rel=1e-12, abs=1e-15)
    assert out.metrics["clipfrac"].item() == pytest.approx(2 / 5)


def test_low_p_tokens_gain_room_and_high_p_tokens_lose_it_versus_ppo():
    # The abstract's diagnosis of PPO's box |ρ − 1| ≤ 0.2, at equal radius (δ = 0.2 ≈ PPO's ±0.2 at p0 = 0.5):
    #  rare token   0.01 → 0.015 (ρ 1.5, A > 0): PPO clips (grad 0: too conservative); d_FR = 0.045 → RIPO trains it
    #  likely token 0.9  → 0.99  (ρ 1.1, A > 0): PPO trains it (1.1 < 1.2: too aggressive); d_FR = 0.443 → RIPO drops it
    old_p = torch.tensor([[0.01, 0.9]], dtype=torch.float64)
    new_p = torch.tensor([[0.015, 0.99]], dtype=torch.float64)
    adv = torch.ones(1, 2, dtype=torch.float64)
    _, ppo_grad = _loss_and_grad(PPOClip(), _inputs(old_p, new_p, adv))
    assert ppo_grad.tolist()[0] == pytest.approx([0.0, -1.1], rel=1e-12)
    for mode in ("masked", "clip"):
        _, ripo_grad = _loss_and_grad(RIPO(RIPOConfig(ripo_mode=mode)), _inputs(old_p, new_p, adv))
        assert ripo_grad.tolist()[0] == pytest.approx([-1.5, 0.0], rel=1e-12, abs=1e-15), mode
    # The allowed ratio width shrinks monotonically with p0 (PPO's is 0.4 for every p0); at p0 > 1/1.2 PPO's
    # upper bound 1.2 is unreachable (ρ ≤ 1/p0), while RIPO's hi stays below 1/p0.
    old = torch.tensor([1e-3, 1e-2, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99], dtype=torch.float64)
    lo, hi = ratio_bounds(old.log(), 0.2)
    width = hi - lo
    assert bool((width[1:] < width[:-1]).all())
    assert width[0] > 0.4 and width[-1] < 0.4
    assert bool((hi[-2:] < 1 / old[-2:]).all()) and bool((1.2 > 1 / old[-2:]).all())


def _random_inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)  # (N, T, V)
    labels = torch.randint(0, 5, (3, 4), generator=g)
    old = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (N, T)
    new = torch.log_softmax(logits + torch.randn(3, 4, 5, generator=g, dtype=torch.float64), -1)
    logp = new.gather(-1, labels.unsqueeze(-1)).squeeze(-1).clone().requires_grad_(True)
    adv = torch.randn(3, 4, generator=g, dtype=torch.float64)
    mask = torch.tensor([[True] * 4, [True, True, False, False], [True] * 3 + [False]])
    return LossInputs(logprobs=logp, old_logprobs=old, advantages=adv, mask=mask)


@pytest.mark.parametrize("mode", ["masked", "clip"])
def test_large_delta_is_the_unclipped_surrogate(mode):
    # δ ≥ π: θ0 ± δ/2 clamp to [0, π/2], so lo = 0 and hi = 1/p0 ≥ ρ for every p ≤ 1: ℓ = −A·ρ.
    inputs = _random_inputs(0)
    out, grad = _loss_and_grad(RIPO(RIPOConfig(fr_delta=4.0, ripo_mode=mode)), inputs)
    want_loss = -inputs.advantages * (inputs.logprobs - inputs.old_logprobs).exp()
    (want_grad,) = torch.autograd.grad(want_loss.sum(), inputs.logprobs)
    assert torch.allclose(out.per_token, want_loss, rtol=1e-12, atol=0)
    assert torch.allclose(grad, want_grad, rtol=1e-12, atol=0)
    assert out.metrics["clipfrac"].item() == 0.0
    # and a small δ does change it (the test can fail)
    small, _ = _loss_and_grad(RIPO(RIPOConfig(fr_delta=0.05, ripo_mode=mode)), _random_inputs(0))
    assert not torch.allclose(small.per_token, want_loss.detach())


def test_on_policy_gradient_equals_ppo():
    inputs = _random_inputs(1)
    on = LossInputs(logprobs=inputs.logprobs, old_logprobs=inputs.logprobs.detach(),
                    advantages=inputs.advantages, mask=inputs.mask)
    _, grad = _loss_and_grad(RIPO(), on)
    _, want = _loss_and_grad(PPOClip(), on)
    assert torch.allclose(grad, want, rtol=1e-12) and bool((grad != 0).any())


def test_config_is_validated_and_built_by_name():
    for bad in ({"fr_delta": 0.0}, {"ripo_mode": "box"}, {"mask_sides": "one"}, {"log_ratio_clamp": 0.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            RIPOConfig(**bad)
    assert build("loss", "ripo", fr_delta=0.1).config == RIPOConfig(fr_delta=0.1)
