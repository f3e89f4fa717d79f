"""gspo: golden values, the token-form gradient, reductions to ppo_clip and REINFORCE."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.aggregation import aggregate
from rlvr.losses.gspo import GSPO, GSPOConfig
from rlvr.losses.ppo_clip import PPOClip, PPOClipConfig
from rlvr.types import LossInputs

EPS_LOW, EPS_HIGH = 3e-4, 4e-4


def test_golden_values():
    # log π − log π_old per row, mask, A:
    #  r0 [0.1, −0.1, 5.0] mask [T, T, F], A = −1: log s = (0.1 − 0.1)/2 = 0 → s = 1 → ℓ = 1 (the 5.0 is padding)
    #  r1 [0.3, 0, 0], A = +1: log s = 0.1 → s = e^0.1 = 1.105171 > 1.0004 → ℓ = max(−1.105171, −1.0004) = −1.0004
    #  r2 [0.3, 0, 0], A = −1: ℓ = max(1.105171, 1.0004) = 1.105171 (pessimistic term unclipped)
    #  r3 [−0.3, 0, 0], A = +1: s = e^−0.1 = 0.904837 → ℓ = max(−0.904837, −0.9997) = −0.904837
    diff = torch.tensor([[0.1, -0.1, 5.0], [0.3, 0.0, 0.0], [0.3, 0.0, 0.0], [-0.3, 0.0, 0.0]])
    mask = torch.ones(4, 3, dtype=torch.bool)
    mask[0, 2] = False
    adv = torch.tensor([-1.0, 1.0, -1.0, 1.0]).unsqueeze(-1).expand(4, 3)
    old = torch.full((4, 3), -1.0)
    logp = (old + diff).requires_grad_(True)
    out = GSPO()(LossInputs(logprobs=logp, old_logprobs=old, advantages=adv, mask=mask))
    s1, s3 = math.exp(0.1), math.exp(-0.1)
    expected = [[1.0, 1.0], [-1.0004] * 3, [s1] * 3, [-s3] * 3]
    got = out.per_token.tolist()
    assert got[0][:2] == pytest.approx(expected[0], rel=1e-6)
    for row in (1, 2, 3):
        assert got[row] == pytest.approx(expected[row], rel=1e-6)
    # token-form gradient ∂ℓ/∂log π_t = −A·s_i where unclipped, 0 where clipped:
    (grad,) = torch.autograd.grad(out.per_token[mask].sum(), logp)
    assert grad[0, :2].tolist() == pytest.approx([1.0, 1.0], rel=1e-6)
    assert grad[1].abs().sum() == 0
    assert grad[2].tolist() == pytest.approx([s1] * 3, rel=1e-6)
    assert grad[3].tolist() == pytest.approx([-s3] * 3, rel=1e-6)
    # clipfrac: the 3 tokens of r1 out of 11 trained
    assert out.metrics["clipfrac"].item() == pytest.approx(3 / 11)
    # seq-mean-token-mean: (1 − 1.0004 + 1.105171 − 0.904837)/4
    agg = aggregate(out.per_token, mask, "seq-mean-token-mean")
    assert agg.item() == pytest.approx((1 - 1.0004 + s1 - s3) / 4, rel=1e-6)


def _policy(seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 4, 5, generator=g).requires_grad_(True)  # (N, T, V)
    labels = torch.randint(0, 5, (3, 4), generator=g)
    mask = torch.tensor([[True] * 4, [True, True, False, False], [True, True, True, False]])
    adv = torch.tensor([1.0, -0.5, 2.0]).unsqueeze(-1).expand(3, 4)
    return logits, labels, mask, adv


def _logp(logits, labels):
    return torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (N, T)


def _seq_mean(x, mask):
    return torch.where(mask, x, 0).sum(-1) / mask.sum(-1)  # (N,)


def test_on_policy_gradient_is_minus_a_grad_mean_logp():
    """docs/methods.md §1.4 test: on-policy, ∇L = −(1/S) Σ_i A_i ∇ mean_t log π (seq-mean-token-mean)."""
    logits, labels, mask, adv = _policy(0)
    logp = _logp(logits, labels)
    out = GSPO()(LossInputs(logprobs=logp, old_logprobs=logp.detach(), advantages=adv, mask=mask))
    (grad,) = torch.autograd.grad(aggregate(out.per_token, mask, "seq-mean-token-mean"), logits)
    reference = -(adv[:, 0] * _seq_mean(_logp(logits, labels), mask)).mean()
    (want,) = torch.autograd.grad(reference, logits)
    assert torch.allclose(grad, want, rtol=1e-5, atol=1e-7)


def test_off_policy_unclipped_gradient_is_scaled_by_sequence_ratio():
    # With clips wide open: ∇ℓ_i = −A_i s_i ∇ mean_t log π, s_i = exp(mean_t(log π − log π_old)).
    logits, labels, mask, adv = _policy(1)
    logp = _logp(logits, labels)
    g = torch.Generator().manual_seed(2)
    old = logp.detach() + 0.3 * torch.randn(3, 4, generator=g)
    out = GSPO(GSPOConfig(eps_low=1.0, eps_high=1e6))(
        LossInputs(logprobs=logp, old_logprobs=old, advantages=adv, mask=mask))
    (grad,) = torch.autograd.grad(aggregate(out.per_token, mask, "seq-mean-token-mean"), logits)
    s = _seq_mean(logp.detach() - old, mask).exp()  # (N,)
    (want,) = torch.autograd.grad(-(adv[:, 0] * s * _seq_mean(_logp(logits, labels), mask)).mean(), logits)
    assert torch.allclose(grad, want, rtol=1e-5, atol=1e-7)


def test_single_token_sequences_equal_ppo_clip():
    # T = 1: the sequence ratio is the token ratio, so GSPO is ppo_clip with the same clip range.
    g = torch.Generator().manual_seed(3)
    old = torch.randn(6, 1, generator=g)
    logp = old + 2e-3 * torch.randn(6, 1, generator=g)  # ratios straddling 1 ± 4e-4
    adv = torch.randn(6, 1, generator=g)
    inputs = LossInputs(logprobs=logp, old_logprobs=old, advantages=adv, mask=torch.ones(6, 1, dtype=torch.bool))
    gspo = GSPO()(inputs).per_token
    ppo = PPOClip(PPOClipConfig(eps_low=EPS_LOW, eps_high=EPS_HIGH))(inputs).per_token
    assert torch.allclose(gspo, ppo, rtol=1e-6)
    assert GSPO()(inputs).metrics["clipfrac"] > 0  # the toy does clip some tokens


def test_log_ratio_upper_clamp():
    # mean log-ratio 12 → clamped to 10: ℓ = −A·e^10 for A = −1
    inputs = LossInputs(logprobs=torch.full((1, 2), 12.0), old_logprobs=torch.zeros(1, 2),
                        advantages=torch.full((1, 2), -1.0), mask=torch.ones(1, 2, dtype=torch.bool))
    assert GSPO()(inputs).per_token.tolist()[0] == pytest.approx([math.exp(10.0)] * 2, rel=1e-5)
