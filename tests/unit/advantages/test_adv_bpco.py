"""BPCO's length-adaptive GAE (docs/methods.md §2.6): the verified toy, λ clamping and its count, Monte-Carlo
returns, no whitening, and GAE's λ = 1 / V ≡ 0 reduction to reward-to-go. Expected numbers are
derived by hand in the comment above each assertion."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlvr import AdvantageInputs, build
from rlvr.registry import RegistryError
from rlvr.types import BatchError


def one_row(length: int, t: int, value: float, reward: float = 1.0) -> AdvantageInputs:
    mask = torch.zeros(1, t, dtype=torch.bool)
    mask[0, :length] = True
    values = torch.where(mask, torch.full((1, t), value), torch.zeros(1, t))
    return AdvantageInputs(rewards=torch.tensor([[reward]]), mask=mask, group_ids=torch.tensor([0]), values=values)


def test_la_gae_toy_of_methods_2_6():
    # L = 5, T = 6 (one padding slot), α = 0.4 → λ = 1 − 1/(0.4·5) = 0.5; V ≡ 0.5, reward 1 on token 4.
    # δ_4 = 1 + 0 − 0.5 = 0.5 → A_4 = 0.5; δ_3..δ_0 = 0 + 0.5 − 0.5 = 0 → A_t = 0.5·A_{t+1}:
    # A = [0.03125, 0.0625, 0.125, 0.25, 0.5, 0]. MC returns: GAE(λ=1) = 0.5 everywhere, + V = 1.
    out = build("advantage", "la_gae", alpha=0.4)(one_row(5, 6, 0.5))
    torch.testing.assert_close(out.advantages, torch.tensor([[0.03125, 0.0625, 0.125, 0.25, 0.5, 0.0]]))
    torch.testing.assert_close(out.returns, torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, 0.0]]))
    assert float(out.metrics["lambda_mean"]) == pytest.approx(0.5)
    assert float(out.metrics["lambda_clamped"]) == 0.0


def test_short_rows_clamp_lambda_and_are_counted():
    # L = 2, α = 0.4 → λ = 1 − 1/0.8 = −0.25 < 0. V ≡ 0.5, reward 1 on token 1:
    #   δ_1 = 0.5, δ_0 = 0 + 0.5 − 0.5 = 0.
    #   clamped (λ = 0): A = [0, 0.5]; unclamped: A_0 = 0 + (−0.25)·0.5 = −0.125.
    # Row 2 (L = 5, λ = 0.5) is not clamped: count = 1.
    a, b = one_row(2, 5, 0.5), one_row(5, 5, 0.5)
    inp = AdvantageInputs(rewards=torch.cat([a.rewards, b.rewards]), mask=torch.cat([a.mask, b.mask]),
                          group_ids=torch.tensor([0, 1]), values=torch.cat([a.values, b.values]))
    out = build("advantage", "la_gae", alpha=0.4)(inp)
    torch.testing.assert_close(out.advantages[0, :2], torch.tensor([0.0, 0.5]))
    assert float(out.metrics["lambda_clamped"]) == 1.0
    assert float(out.metrics["lambda_mean"]) == pytest.approx((0.0 + 0.5) / 2)
    raw = build("advantage", "la_gae", alpha=0.4, clamp_lambda=False)(inp)
    torch.testing.assert_close(raw.advantages[0, :2], torch.tensor([-0.125, 0.5]))
    assert float(raw.metrics["lambda_clamped"]) == 1.0  # counted whether or not it is clamped


def test_no_whitening_scales_with_the_reward():
    # V ≡ 0: δ_t = r_t, so A is linear in the rewards; c = 3 triples every advantage (whitening
    # would make it invariant).
    base = one_row(4, 4, 0.0, reward=0.5)
    scaled = dataclasses.replace(base, rewards=base.rewards * 3)
    est = build("advantage", "la_gae")
    a, b = est(base).advantages, est(scaled).advantages
    assert a.abs().sum() > 0
    torch.testing.assert_close(b, 3 * a)


def test_gae_lambda_one_zero_values_is_reward_to_go():
    # Dense rewards r = [1, 2, 0, 4] (token 2 untrained and skipped), γ = 1, λ = 1, V ≡ 0:
    # A_t = Σ_{s≥t, trained} r_s = [1+2+4, 2+4, 0 (untrained), 4] = [7, 6, 0, 4].
    mask = torch.tensor([[True, True, False, True]])
    inp = AdvantageInputs(rewards=torch.zeros(1, 1), mask=mask, group_ids=torch.tensor([0]),
                          token_rewards=torch.tensor([[1.0, 2.0, 9.0, 4.0]]), values=torch.zeros(1, 4))
    out = build("advantage", "gae", lam=1.0, gamma=1.0, whiten=False)(inp)
    torch.testing.assert_close(out.advantages, torch.tensor([[7.0, 6.0, 0.0, 4.0]]))
    from rlvr.critic import mc_returns
    torch.testing.assert_close(mc_returns(inp), out.advantages)  # the critic's MC targets agree


def test_la_gae_needs_values_and_a_positive_alpha():
    inp = dataclasses.replace(one_row(3, 3, 0.0), values=None)
    with pytest.raises(BatchError, match="la_gae needs critic values"):
        build("advantage", "la_gae")(inp)
    with pytest.raises((RegistryError, ValueError), match="alpha must be > 0"):
        build("advantage", "la_gae", alpha=0.0)
    assert build("advantage", "la_gae").needs_values
