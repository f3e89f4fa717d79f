"""Mixed on/off-policy losses (OC-GRPO, ARMOR): golden values, reductions, caps and gradients."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.registry import build
from rlvr.types import Origin, LossInputs

P, G, R = int(Origin.POLICY), int(Origin.GUIDED), int(Origin.REFERENCE)


def _inputs(logp, old, behaviour, adv, origin, mask=None) -> LossInputs:
    logp = torch.tensor(logp, requires_grad=True)
    mask = torch.ones_like(logp, dtype=torch.bool) if mask is None else torch.tensor(mask)
    return LossInputs(logprobs=logp, old_logprobs=torch.tensor(old), advantages=torch.tensor(adv), mask=mask,
                      behaviour_logprobs=torch.tensor(behaviour),
                      token_origin=None if origin is None else torch.tensor(origin, dtype=torch.uint8))


def test_truncated_is_golden_value_and_gradient():
    # One guided token: log pi = log 0.5, behaviour log pi_old(.|x,h) = log 0.25 → rho = 2, capped at C = 1.5.
    # loss = -min(rho, C)·A·log pi = -1.5·2·log 0.5 = 3·ln 2 ≈ 2.0794; d loss / d log pi = -1.5·2 = -3.
    # The second token is on-policy (ratio 1): PPO gives -A·rho = -(-1)·1 = 1, gradient -A·rho = 1.
    inp = _inputs([[math.log(0.5), -1.0]], [[0.0, -1.0]], [[math.log(0.25), 0.0]], [[2.0, -1.0]], [[G, P]])
    out = build("loss", "oc_grpo", is_cap=1.5)(inp)
    assert out.per_token[0, 0].item() == pytest.approx(3 * math.log(2), rel=1e-6)
    assert out.per_token[0, 1].item() == pytest.approx(1.0, rel=1e-6)
    out.per_token.sum().backward()
    assert inp.logprobs.grad[0].tolist() == pytest.approx([-3.0, 1.0], rel=1e-6)
    assert out.metrics["offpolicy_frac"].item() == pytest.approx(0.5)
    assert out.metrics["is_capped_frac"].item() == pytest.approx(1.0)
    assert out.metrics["is_weight_mean"].item() == pytest.approx(1.5)


def test_oc_grpo_ppo_clip_mode_golden():
    # rho = exp(log 0.6 − log 0.4) = 1.5, A = 1, wide_eps = 0.3: max(−1.5, −1.3) = −1.3 (clipped: no gradient).
    inp = _inputs([[math.log(0.6)]], [[0.0]], [[math.log(0.4)]], [[1.0]], [[G]])
    out = build("loss", "oc_grpo", is_mode="ppo_clip", wide_eps=0.3)(inp)
    assert out.per_token.item() == pytest.approx(-1.3, rel=1e-6)
    out.per_token.sum().backward()
    assert inp.logprobs.grad.item() == 0.0


@pytest.mark.parametrize("name,params", [("oc_grpo", {}), ("armor", {"anchor_is_cap": 2.0})])
@pytest.mark.parametrize("origin", [None, "policy"])
def test_without_off_policy_tokens_equals_ppo_clip(name, params, origin):
    torch.manual_seed(0)
    logp, old, adv = torch.randn(3, 5) - 1, torch.randn(3, 5) - 1, torch.randn(3, 5)
    mask = torch.rand(3, 5) > 0.3
    codes = None if origin is None else torch.zeros(3, 5, dtype=torch.uint8)
    behaviour = torch.randn(3, 5)  # ignored: no token is off-policy
    ours = build("loss", name, **params)(LossInputs(logp, old, adv, mask, token_origin=codes,
                                                    behaviour_logprobs=behaviour))
    ppo = build("loss", "ppo_clip")(LossInputs(logp, old, adv, mask))
    assert torch.equal(ours.per_token, ppo.per_token)
    assert ours.metrics["clipfrac"] == ppo.metrics["clipfrac"]


def test_is_weight_never_exceeds_the_cap():
    torch.manual_seed(1)
    logp = torch.randn(4, 6)
    behaviour = logp - 3 * torch.rand(4, 6)  # rho = e^{0..3}, often above the cap
    adv = torch.ones(4, 6)
    inp = LossInputs(logp.clone().requires_grad_(), torch.zeros(4, 6), adv, torch.ones(4, 6, dtype=torch.bool),
                     token_origin=torch.full((4, 6), G, dtype=torch.uint8), behaviour_logprobs=behaviour)
    out = build("loss", "oc_grpo", is_cap=2.0)(inp)
    out.per_token.sum().backward()
    # d loss / d log pi = −min(rho, C)·A, so |grad| ≤ C·|A| = 2 everywhere.
    assert inp.logprobs.grad.abs().max().item() <= 2.0 + 1e-6
    assert out.metrics["is_weight_mean"].item() <= 2.0 + 1e-6


def test_armor_at_reference_is_reinforce_on_anchors():
    # pi_theta = pi_ref: rho_anc = 1 ≤ C, so the anchor term is −A·log pi (REINFORCE), value and gradient.
    logp = torch.tensor([[-0.7, -1.2, -0.3]])
    adv = torch.tensor([[0.5, 0.5, 0.5]])
    inp = LossInputs(logp.clone().requires_grad_(), logp.clone(), adv, torch.ones(1, 3, dtype=torch.bool),
                     token_origin=torch.full((1, 3), R, dtype=torch.uint8), behaviour_logprobs=logp.clone())
    out = build("loss", "armor", anchor_is_cap=2.0)(inp)
    assert torch.allclose(out.per_token, -adv * logp)
    out.per_token.sum().backward()
    assert torch.allclose(inp.logprobs.grad, -adv)


def test_armor_positive_only_gives_negative_anchors_no_gradient():
    inp = _inputs([[-0.5, -0.5, -0.5]], [[-0.5, -0.5, -0.5]], [[-0.5, -0.5, -0.5]], [[1.0, -1.0, -1.0]],
                  [[R, R, P]])
    out = build("loss", "armor", anchor_is_cap=2.0, anchor_positive_only=True)(inp)
    out.per_token.sum().backward()
    grad = inp.logprobs.grad[0]
    assert grad[0].item() == pytest.approx(-1.0)  # positive anchor: REINFORCE −A
    assert grad[1].item() == 0.0  # negative anchor: dropped exactly
    assert grad[2].item() == pytest.approx(1.0)  # on-policy token: PPO −A·rho = 1


def test_required_options_are_checked():
    with pytest.raises(ValueError, match="anchor_is_cap is required"):
        build("loss", "armor")
    with pytest.raises(ValueError, match="requires wide_eps"):
        build("loss", "oc_grpo", is_mode="ppo_clip")
    with pytest.raises(ValueError, match="unknown is_mode"):
        build("loss", "oc_grpo", is_mode="clip")


def test_off_policy_tokens_without_behaviour_logprobs_are_an_error():
    inp = LossInputs(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool),
                     token_origin=torch.tensor([[G, P]], dtype=torch.uint8))
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        build("loss", "oc_grpo")(inp)
