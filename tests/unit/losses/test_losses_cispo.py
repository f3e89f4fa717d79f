"""cispo: golden values, the clipped-but-alive gradient, reductions."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.losses.cispo import CISPO, CISPOConfig
from rlvr.losses.ppo_clip import PPOClip
from rlvr.types import LossInputs


def _inputs(ratio, adv, old):
    logp = (old + ratio.log()).clone().requires_grad_(True)
    return LossInputs(logprobs=logp, old_logprobs=old, advantages=adv, mask=torch.ones_like(adv, dtype=torch.bool))


def _grad(out, inputs):
    (grad,) = torch.autograd.grad(out.per_token.sum(), inputs.logprobs)
    return grad


def test_golden_values():
    # ρ = [1.5, 0.5, 1.1], A = [1, −1, 2], log π_old = [−1, −1, −2], eps 0.2/0.2:
    # weight sg(clip(ρ, .8, 1.2)) = [1.2, 0.8, 1.1]; log π = log π_old + log ρ = [−0.594535, −1.693147, −1.904690]
    # ℓ = −w·A·log π = [0.713442, −1.354518, 4.190318]; ∂ℓ/∂log π = −w·A = [−1.2, 0.8, −2.2]
    inputs = _inputs(torch.tensor([[1.5, 0.5, 1.1]]), torch.tensor([[1.0, -1.0, 2.0]]), torch.tensor([[-1.0, -1.0, -2.0]]))
    out = CISPO()(inputs)
    assert out.per_token.tolist()[0] == pytest.approx([0.713442, -1.354518, 4.190318], abs=1e-5)
    assert _grad(out, inputs).tolist()[0] == pytest.approx([-1.2, 0.8, -2.2], rel=1e-5)
    assert out.metrics["clipfrac"].item() == pytest.approx(2 / 3)  # t0 and t1 clipped


def test_clipped_token_keeps_a_gradient_where_ppo_drops_it():
    # ρ = 1.5, A = 1: PPO-clip's gradient is 0, CISPO's is −1.2
    inputs = _inputs(torch.tensor([[1.5]]), torch.tensor([[1.0]]), torch.zeros(1, 1))
    assert _grad(PPOClip()(inputs), inputs).item() == 0.0
    assert _grad(CISPO()(inputs), inputs).item() == pytest.approx(-1.2)


def test_unclipped_gradient_equals_ppo_and_on_policy_equals_reinforce():
    g = torch.Generator().manual_seed(0)
    old = torch.randn(3, 4, generator=g)
    ratio = torch.exp(0.05 * torch.randn(3, 4, generator=g))  # inside 1 ± 0.2
    adv = torch.randn(3, 4, generator=g)
    inputs = _inputs(ratio, adv, old)
    assert torch.allclose(_grad(CISPO()(inputs), inputs), _grad(PPOClip()(inputs), inputs), rtol=1e-5)
    on = _inputs(torch.ones(3, 4), adv, old)
    assert torch.allclose(_grad(CISPO()(on), on), -adv, rtol=1e-6)  # REINFORCE: −A ∇log π


def test_eps_low_one_removes_the_lower_bound():
    # ρ = 0.1, A = −1: with eps_low = 0.2 the weight is 0.8; with eps_low = 1 it is ρ itself.
    inputs = _inputs(torch.tensor([[0.1]]), torch.tensor([[-1.0]]), torch.zeros(1, 1))
    assert _grad(CISPO()(inputs), inputs).item() == pytest.approx(0.8)
    assert _grad(CISPO(CISPOConfig(eps_low=1.0))(inputs), inputs).item() == pytest.approx(0.1, rel=1e-5)
    assert math.isfinite(CISPO()(inputs).per_token.item())
