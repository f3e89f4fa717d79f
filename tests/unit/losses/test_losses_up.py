"""up: golden values at both levels, the A > 0 anchor gradient, reductions to ppo_clip and gspo."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.aggregation import aggregate
from rlvr.losses.gspo import GSPO, GSPOConfig
from rlvr.losses.ppo_clip import PPOClip, PPOClipConfig
from rlvr.losses.up import UnboundedPositive, UPConfig
from rlvr.registry import build
from rlvr.types import LossInputs


def _inputs(ratio, adv, mask=None):
    old = torch.full_like(ratio, -1.0)
    logp = (old + ratio.log()).clone().requires_grad_(True)
    mask = torch.ones_like(ratio, dtype=torch.bool) if mask is None else mask
    return LossInputs(logprobs=logp, old_logprobs=old, advantages=adv, mask=mask)


def _loss_and_grad(loss_fn, inputs, reduce=None):
    out = loss_fn(inputs)
    total = out.per_token[inputs.mask].sum() if reduce is None else reduce(out.per_token)
    (grad,) = torch.autograd.grad(total, inputs.logprobs)
    return out, grad


def test_golden_token_level():
    # ρ = [5, 0.5, 0.5, 5], A = [+2, +1, −1, −1], eps 0.2 (ppo_clip defaults):
    #  t0 A=+2 ρ=5:   UP ℓ = −A·exp(0) = −2, ∂ℓ/∂log π = −A = −2   (ppo_clip: −2·1.2 = −2.4, grad 0)
    #  t1 A=+1 ρ=0.5: UP ℓ = −1, grad −1                          (ppo_clip: −0.5, grad −ρA = −0.5)
    #  t2 A=−1 ρ=0.5: base max(0.5, 0.8) = 0.8, clipped → grad 0
    #  t3 A=−1 ρ=5:   base max(5, 1.2) = 5, unclipped → grad −A·ρ = 5
    inputs = _inputs(torch.tensor([[5.0, 0.5, 0.5, 5.0]]), torch.tensor([[2.0, 1.0, -1.0, -1.0]]))
    out, grad = _loss_and_grad(UnboundedPositive(), inputs)
    assert out.per_token.tolist()[0] == pytest.approx([-2.0, -1.0, 0.8, 5.0], rel=1e-6)
    assert grad.tolist()[0] == pytest.approx([-2.0, -1.0, 0.0, 5.0], rel=1e-6)
    # clipfrac counts A <= 0 tokens the base clips (t2); pos_unclipped_frac the A > 0 ones it would (t0)
    assert out.metrics["clipfrac"].item() == pytest.approx(1 / 4)
    assert out.metrics["pos_unclipped_frac"].item() == pytest.approx(1 / 4)
    assert out.metrics["pos_frac"].item() == pytest.approx(2 / 4)
    # ppo_clip on the same tokens differs exactly on the A > 0 ones
    ppo_out, ppo_grad = _loss_and_grad(PPOClip(), _inputs(torch.tensor([[5.0, 0.5, 0.5, 5.0]]),
                                                          torch.tensor([[2.0, 1.0, -1.0, -1.0]])))
    assert ppo_grad.tolist()[0] == pytest.approx([0.0, -0.5, 0.0, 5.0], rel=1e-6)
    assert ppo_out.per_token.tolist()[0] == pytest.approx([-2.4, -0.5, 0.8, 5.0], rel=1e-6)


def test_golden_sequence_level():
    # log π − log π_old per row, A per row (gspo's clip 3e-4/4e-4):
    #  r0 [0.1, −0.1] (+ padding 5.0), A = −1: s = e^0 = 1 → ℓ = 1, ∂ℓ/∂log π_t = −A·s = 1
    #  r1 [0.3, 0, 0], A = +1: UP ℓ_t = −1, grad −1 per token (gspo clips s = e^0.1 > 1.0004: grad 0)
    #  r2 [0.3, 0, 0], A = −1: gspo ℓ = max(e^0.1, 1.0004) = e^0.1, grad −A·s = e^0.1
    diff = torch.tensor([[0.1, -0.1, 5.0], [0.3, 0.0, 0.0], [0.3, 0.0, 0.0]])
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[0, 2] = False
    adv = torch.tensor([-1.0, 1.0, -1.0]).unsqueeze(-1).expand(3, 3)
    inputs = _inputs(diff.exp(), adv, mask)
    out, grad = _loss_and_grad(UnboundedPositive(UPConfig(level="sequence")), inputs)
    s = math.exp(0.1)
    got = out.per_token.tolist()
    assert got[0][:2] == pytest.approx([1.0, 1.0], rel=1e-6)
    assert got[1] == pytest.approx([-1.0] * 3, rel=1e-6)
    assert got[2] == pytest.approx([s] * 3, rel=1e-6)
    assert grad[0, :2].tolist() == pytest.approx([1.0, 1.0], rel=1e-6)
    assert grad[1].tolist() == pytest.approx([-1.0] * 3, rel=1e-6)
    assert grad[2].tolist() == pytest.approx([s] * 3, rel=1e-6)
    assert out.metrics["pos_unclipped_frac"].item() == pytest.approx(3 / 8)  # r1's 3 of 8 trained tokens


def _policy(seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(4, 5, 6, generator=g, dtype=torch.float64).requires_grad_(True)  # (N, T, V)
    labels = torch.randint(0, 6, (4, 5), generator=g)
    old = (torch.log_softmax(logits.detach(), -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
           + 0.6 * torch.randn(4, 5, generator=g, dtype=torch.float64))  # off-policy: ratios far outside 1 ± 0.2
    mask = torch.tensor([[True] * 5, [True, True, True, False, False], [True] * 4 + [False], [True] * 5])
    adv = torch.tensor([1.5, -0.7, 0.4, -1.2], dtype=torch.float64).unsqueeze(-1).expand(4, 5).clone()
    adv[0, 1] = -0.3  # token-level advantages of both signs inside one row
    return logits, labels, old, mask, adv


def _logp(logits, labels):
    return torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (N, T)


def _grad(loss_fn, logits, labels, old, mask, adv, mode="token-mean"):
    inputs = LossInputs(logprobs=_logp(logits, labels), old_logprobs=old, advantages=adv, mask=mask)
    out = loss_fn(inputs)
    agg = aggregate(out.per_token, mask, mode)
    (grad,) = torch.autograd.grad(agg, logits)
    return out, agg, grad


@pytest.mark.parametrize("level,base", [
    ("token", PPOClip(PPOClipConfig(eps_low=0.2, eps_high=0.28, clip_ratio_c=3.0))),
    ("sequence", GSPO(GSPOConfig())),
])
def test_positive_branch_off_is_exactly_the_base(level, base):
    logits, labels, old, mask, adv = _policy(0)
    extra = {"eps_high": 0.28, "clip_ratio_c": 3.0} if level == "token" else {}
    up = UnboundedPositive(UPConfig(level=level, unbounded_positive=False, **extra))
    out, agg, grad = _grad(up, logits, labels, old, mask, adv)
    want_out, want_agg, want_grad = _grad(base, logits, labels, old, mask, adv)
    assert torch.equal(out.per_token, want_out.per_token) and torch.equal(grad, want_grad)
    assert out.metrics.keys() == want_out.metrics.keys()


def test_token_level_grad_is_minus_a_grad_logp_on_positive_and_base_on_negative():
    """docs/methods.md §2.27 tests 1–2: per token, A > 0 → −A∇log π for any ratio; A ≤ 0 → ppo_clip's gradient."""
    logits, labels, old, mask, adv = _policy(1)
    logp = _logp(logits, labels)
    out = UnboundedPositive()(LossInputs(logprobs=logp, old_logprobs=old, advantages=adv, mask=mask))
    base = PPOClip()(LossInputs(logprobs=logp, old_logprobs=old, advantages=adv, mask=mask))
    ratio = (logp - old).exp().detach()
    assert bool(((ratio > 1.2) & (adv > 0) & mask).any())  # some A > 0 token that ppo_clip would clip
    pos, neg = (adv > 0) & mask, (adv <= 0) & mask
    for i, j in pos.nonzero().tolist():
        (g,) = torch.autograd.grad(out.per_token[i, j], logits, retain_graph=True)
        (want,) = torch.autograd.grad(-adv[i, j] * logp[i, j], logits, retain_graph=True)
        assert torch.allclose(g, want, rtol=1e-12, atol=1e-12)
        assert out.per_token[i, j].item() == pytest.approx(-adv[i, j].item())
    assert torch.equal(out.per_token[neg], base.per_token[neg])
    (g_neg,) = torch.autograd.grad(out.per_token[neg].sum(), logits, retain_graph=True)
    (want_neg,) = torch.autograd.grad(base.per_token[neg].sum(), logits)
    assert torch.allclose(g_neg, want_neg, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("level,base,mode", [("token", PPOClip(), "token-mean"),
                                             ("sequence", GSPO(), "seq-mean-token-mean")])
def test_on_policy_equals_base_in_value_and_gradient(level, base, mode):
    """docs/methods.md §2.27 test 3: with log π_old = log π every ratio is 1, so UP = base everywhere."""
    logits, labels, _, mask, adv = _policy(2)
    old = _logp(logits, labels).detach()
    out, agg, grad = _grad(UnboundedPositive(UPConfig(level=level)), logits, labels, old, mask, adv, mode)
    _, want_agg, want_grad = _grad(base, logits, labels, old, mask, adv, mode)
    assert agg.item() == pytest.approx(want_agg.item(), rel=1e-12)
    assert torch.allclose(grad, want_grad, rtol=1e-10, atol=1e-12)
    assert out.metrics["pos_unclipped_frac"].item() == 0.0


def test_sequence_level_positive_gradient_is_minus_a_grad_mean_logp():
    # A > 0 rows, seq-mean-token-mean: ∇L = −(1/N) Σ_i A_i ∇ mean_t log π, whatever the sequence ratio.
    logits, labels, old, mask, _ = _policy(3)
    adv = torch.tensor([1.5, 0.7, 0.4, 1.2], dtype=torch.float64).unsqueeze(-1).expand(4, 5)
    _, _, grad = _grad(UnboundedPositive(UPConfig(level="sequence")), logits, labels, old, mask, adv,
                       "seq-mean-token-mean")
    logp = _logp(logits, labels)
    seq_mean = torch.where(mask, logp, 0).sum(-1) / mask.sum(-1)
    (want,) = torch.autograd.grad(-(adv[:, 0] * seq_mean).mean(), logits)
    assert torch.allclose(grad, want, rtol=1e-6, atol=1e-9)  # aggregate's weights are float32


def test_config_is_validated_and_built_by_name():
    with pytest.raises(ValueError, match="level"):
        UPConfig(level="segment")
    with pytest.raises(ValueError, match="clip_ratio_c"):
        UPConfig(level="sequence", clip_ratio_c=3.0)
    with pytest.raises(ValueError, match="eps_low"):
        UPConfig(eps_low=-0.1)
    loss = build("loss", "up", level="sequence")
    assert isinstance(loss.base, GSPO) and loss.base.config == GSPOConfig()
    assert UnboundedPositive().base.config == PPOClipConfig()
