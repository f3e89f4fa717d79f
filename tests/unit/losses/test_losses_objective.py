"""Objective: policy + KL − entropy with one aggregation; splits, errors and the NaN guard."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.aggregation import Aggregation, aggregate, global_normalisers
from rlvr.losses import NonFiniteLossError, Objective, ObjectiveConfig
from rlvr.losses.ppo_clip import PPOClip, PPOClipConfig
from rlvr.ops import kl_estimate
from rlvr.registry import RegistryError, build
from rlvr.types import BatchError, LossInputs


def _golden_inputs(**overrides):
    # on-policy: ρ = 1, A = [1, 1] → ℓ = −A = [−1, −1]
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    fields = dict(logprobs=logp, old_logprobs=logp.detach(), advantages=torch.ones(1, 2),
                  mask=torch.ones(1, 2, dtype=torch.bool), ref_logprobs=torch.tensor([[-2.0, -1.0]]),
                  entropy=torch.tensor([[0.5, 1.5]]))
    fields.update(overrides)
    return LossInputs(**fields)


def test_golden_total():
    # token-mean policy = −1; k3 with d = [1, −1] → [e^−1, e − 2] = [0.367879, 0.718282], mean 0.543081;
    # entropy mean 1.0. loss = −1 + 0.1·0.543081 − 0.01·1.0 = −0.955692
    objective = Objective(PPOClip(), aggregation="token-mean", kl_coef=0.1, entropy_coef=0.01)
    loss, metrics = objective(_golden_inputs())
    kl = (math.exp(-1) + math.e - 2) / 2
    assert loss.item() == pytest.approx(-1 + 0.1 * kl - 0.01, rel=1e-6)
    assert metrics["loss/policy"].item() == pytest.approx(-1.0)
    assert metrics["loss/kl"].item() == pytest.approx(kl, rel=1e-6)
    assert metrics["loss/entropy"].item() == pytest.approx(1.0)
    assert metrics["loss/total"].item() == pytest.approx(loss.item())
    assert {"loss/clipfrac", "loss/approx_kl"} <= set(metrics)
    assert all(k.startswith("loss/") and not v.requires_grad and v.dim() == 0 for k, v in metrics.items())


def test_policy_only_equals_aggregated_per_token_loss():
    g = torch.Generator().manual_seed(0)
    old = torch.randn(4, 5, generator=g)
    logp = old + 0.3 * torch.randn(4, 5, generator=g)
    adv = torch.randn(4, 5, generator=g)
    mask = torch.rand(4, 5, generator=g) > 0.3
    inputs = LossInputs(logprobs=logp, old_logprobs=old, advantages=adv, mask=mask,
                        ref_logprobs=old, entropy=torch.ones(4, 5))
    ppo = PPOClip(PPOClipConfig(eps_high=0.28))
    for mode in ("token-mean", "seq-mean-token-sum-norm"):
        loss, metrics = Objective(ppo, ObjectiveConfig(aggregation=Aggregation(mode=mode)))(inputs)
        assert torch.allclose(loss, aggregate(ppo(inputs).per_token, mask, mode))
        assert "loss/kl" in metrics and "loss/entropy" in metrics  # logged even with coefficient 0


def test_coefficient_zero_terms_do_not_touch_the_gradient():
    inputs = _golden_inputs()
    loss, _ = Objective(PPOClip())(inputs)
    (grad,) = torch.autograd.grad(loss, inputs.logprobs)
    # seq-mean-token-mean of −A·ρ on one row of 2 tokens: ∂/∂log π = −1/2 each
    assert grad.tolist()[0] == pytest.approx([-0.5, -0.5])


def test_kl_straight_through_gradient_is_k2():
    inputs = _golden_inputs()
    objective = Objective(PPOClip(), aggregation="token-mean", kl_coef=1.0, kl_straight_through=True)
    loss, metrics = objective(inputs)
    (grad,) = torch.autograd.grad(loss, inputs.logprobs)
    # policy part −1/2 per token; KL part ∂(½d²)/∂log π / 2 = d/2 = [0.5, −0.5]
    assert grad.tolist()[0] == pytest.approx([0.0, -1.0])
    assert metrics["loss/kl"].item() == pytest.approx((math.exp(-1) + math.e - 2) / 2, rel=1e-6)


def _random_inputs(seed: int, n: int = 8, t: int = 5):
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(n, t, generator=g)
    logp = (old + 0.4 * torch.randn(n, t, generator=g)).requires_grad_(True)
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    lengths[2] = 0
    mask = torch.arange(t) < lengths.unsqueeze(-1)
    entropy = torch.rand(n, t, generator=g).requires_grad_(True)
    return LossInputs(logprobs=logp, old_logprobs=old, advantages=torch.randn(n, t, generator=g), mask=mask,
                      ref_logprobs=old + 0.2 * torch.randn(n, t, generator=g), entropy=entropy)


def _rows(inputs: LossInputs, rows):
    return LossInputs(**{k: (getattr(inputs, k)[rows] if getattr(inputs, k) is not None else None)
                         for k in ("logprobs", "old_logprobs", "advantages", "mask", "ref_logprobs",
                                   "rollout_logprobs", "entropy")})


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm", "length-power"])
@pytest.mark.parametrize("parts, dp_size", [(2, 1), (4, 1), (2, 2)])
def test_micro_batches_and_shards_give_the_full_batch_loss_and_gradient(mode, parts, dp_size):
    objective = Objective(PPOClip(PPOClipConfig(eps_high=0.28, clip_ratio_c=3.0)),
                          aggregation=Aggregation(mode=mode, alpha=0.5), kl_coef=0.05, entropy_coef=0.01)
    full_in = _random_inputs(1)
    full, _ = objective(full_in)
    full_grads = torch.autograd.grad(full, (full_in.logprobs, full_in.entropy))

    split_in = _random_inputs(1)
    norms = global_normalisers(split_in.mask)
    total = torch.zeros(())
    for rows in torch.arange(8).chunk(parts):
        part, _ = objective(_rows(split_in, rows), **norms, dp_size=dp_size)
        part.backward()
        total = total + part.detach()
    # dp_size = d scales each part by d; DDP would average d ranks' gradients, so divide by d here.
    assert torch.allclose(total / dp_size, full.detach(), rtol=1e-5, atol=1e-7)
    assert torch.allclose(split_in.logprobs.grad / dp_size, full_grads[0], rtol=1e-5, atol=1e-7)
    assert torch.allclose(split_in.entropy.grad / dp_size, full_grads[1], rtol=1e-5, atol=1e-7)


def test_missing_ref_logprobs_or_entropy_are_clear_errors():
    inputs = _golden_inputs(ref_logprobs=None, entropy=None)
    with pytest.raises(BatchError, match="kl_coef=0.1 needs LossInputs.ref_logprobs"):
        Objective(PPOClip(), kl_coef=0.1)(inputs)
    with pytest.raises(BatchError, match="entropy_coef=0.01 needs LossInputs.entropy"):
        Objective(PPOClip(), entropy_coef=0.01)(inputs)
    Objective(PPOClip())(inputs)  # both off: fine


@pytest.mark.parametrize("field, bad, term", [
    ("logprobs", float("nan"), "'policy'"),
    ("ref_logprobs", float("nan"), "'kl'"),
    ("entropy", float("inf"), "'entropy'"),
    ("advantages", float("inf"), "'policy'"),
])
def test_non_finite_terms_are_named(field, bad, term):
    inputs = _golden_inputs()
    values = getattr(inputs, field).detach().clone()
    values[0, 1] = bad
    objective = Objective(PPOClip(), aggregation="token-mean", kl_coef=0.1, entropy_coef=0.01,
                          kl_clamp=None)
    with pytest.raises(NonFiniteLossError, match=term) as err:
        objective(_golden_inputs(**{field: values}))
    others = {"'policy'", "'kl'", "'entropy'"} - {term}
    if field != "logprobs":  # a NaN log-prob also poisons the KL term; the others stay clean
        assert not any(o in str(err.value) for o in others)
    assert isinstance(err.value, RuntimeError)


def test_non_finite_values_at_masked_positions_are_ignored():
    mask = torch.tensor([[True, False]])
    logp = torch.tensor([[-1.0, float("nan")]], requires_grad=True)
    inputs = LossInputs(logprobs=logp, old_logprobs=torch.tensor([[-1.0, 0.0]]), advantages=torch.ones(1, 2),
                        mask=mask, ref_logprobs=torch.tensor([[-1.0, float("inf")]]),
                        entropy=torch.tensor([[1.0, float("nan")]]))
    loss, _ = Objective(PPOClip(), kl_coef=0.1, entropy_coef=0.1)(inputs)
    loss.backward()
    assert loss.item() == pytest.approx(-1.0 - 0.1)
    assert torch.isfinite(logp.grad).all()


def test_config_errors():
    with pytest.raises(RegistryError, match="kl_coeff"):
        Objective(PPOClip(), kl_coeff=0.1)
    with pytest.raises(ValueError, match="unknown kl_estimator 'k5'"):
        ObjectiveConfig(kl_estimator="k5")
    with pytest.raises(ValueError, match="unknown aggregation mode"):
        ObjectiveConfig(aggregation="mean")
    with pytest.raises(ValueError, match=">= 0"):
        ObjectiveConfig(kl_coef=-1.0)
    with pytest.raises(TypeError, match="built PolicyLoss"):
        Objective("ppo_clip")
    assert isinstance(Objective(build("loss", "gspo")).policy_loss, type(build("loss", "gspo")))


def test_kl_estimator_choice_reaches_the_loss():
    inputs = _golden_inputs()
    for kind in ("k1", "k2", "k3", "abs"):
        _, metrics = Objective(PPOClip(), aggregation="token-mean", kl_coef=1.0, kl_estimator=kind)(inputs)
        want = kl_estimate(inputs.logprobs, inputs.ref_logprobs, kind).mean()
        assert metrics["loss/kl"].item() == pytest.approx(want.item(), rel=1e-6)
