"""Golden values and reductions for the token-level estimators: gae and reinforce_pp.
Every expected number is derived by hand in the comment above it."""

from __future__ import annotations

import pytest
import torch

from rlvr import AdvantageInputs, BatchError, build
from rlvr.advantages import outcome_token_rewards
from rlvr.ops import masked_whiten

T3 = torch.tensor


def one_row(rewards, values=None, mask=None) -> AdvantageInputs:
    tr = T3([rewards], dtype=torch.float32)
    m = torch.ones_like(tr, dtype=torch.bool) if mask is None else T3([mask])
    v = None if values is None else T3([values], dtype=torch.float32)
    return AdvantageInputs(rewards=torch.zeros(1, 1), mask=m, group_ids=T3([0]), token_rewards=tr, values=v)


# --- gae --------------------------------------------------------------------------------------

def test_gae_golden():
    # r = (0, 0, 1), V = (0.5, 0.2, 0.4), γ = 0.9, λ = 0.5 (γλ = 0.45), no whitening:
    # t=2: δ = 1 + 0.9·0 − 0.4 = 0.6,              A = 0.6
    # t=1: δ = 0 + 0.9·0.4 − 0.2 = 0.16,           A = 0.16 + 0.45·0.6 = 0.43
    # t=0: δ = 0 + 0.9·0.2 − 0.5 = −0.32,          A = −0.32 + 0.45·0.43 = −0.1265
    # returns = A + V = (0.3735, 0.63, 1.0)
    out = build("advantage", "gae", gamma=0.9, lam=0.5, whiten=False)(one_row([0, 0, 1], [0.5, 0.2, 0.4]))
    torch.testing.assert_close(out.advantages, T3([[-0.1265, 0.43, 0.6]]), atol=1e-6, rtol=0)
    torch.testing.assert_close(out.returns, T3([[0.3735, 0.63, 1.0]]), atol=1e-6, rtol=0)


def test_gae_mc_returns_golden():
    # returns='mc': A(λ=1) + V = discounted return-to-go of r = (0, 0, 1) with γ = 0.9: (0.81, 0.9, 1).
    out = build("advantage", "gae", gamma=0.9, lam=0.5, whiten=False, returns="mc")(
        one_row([0, 0, 1], [0.5, 0.2, 0.4]))
    torch.testing.assert_close(out.returns, T3([[0.81, 0.9, 1.0]]), atol=1e-6, rtol=0)
    torch.testing.assert_close(out.advantages, T3([[-0.1265, 0.43, 0.6]]), atol=1e-6, rtol=0)  # unchanged


def test_gae_skips_untrained_tokens_golden():
    # mask (T, F, T): the middle token (reward 5, value 9) is skipped, V_next and A_next carry over it.
    # t=2: δ = 1 − 0.4 = 0.6, A = 0.6;  t=0: δ = 0 + 0.9·0.4 − 0.5 = −0.14, A = −0.14 + 0.45·0.6 = 0.13.
    # Output (0.13, 0, 0.6); returns (0.63, 0, 1.0).
    out = build("advantage", "gae", gamma=0.9, lam=0.5, whiten=False)(
        one_row([0, 5, 1], [0.5, 9.0, 0.4], mask=[True, False, True]))
    torch.testing.assert_close(out.advantages, T3([[0.13, 0.0, 0.6]]), atol=1e-6, rtol=0)
    torch.testing.assert_close(out.returns, T3([[0.63, 0.0, 1.0]]), atol=1e-6, rtol=0)


def test_gae_lambda_zero_is_td_error():
    # λ = 0: A_t = δ_t = r_t + γ V_{t+1} − V_t = (−0.32, 0.16, 0.6) for the golden row.
    out = build("advantage", "gae", gamma=0.9, lam=0.0, whiten=False)(one_row([0, 0, 1], [0.5, 0.2, 0.4]))
    torch.testing.assert_close(out.advantages, T3([[-0.32, 0.16, 0.6]]), atol=1e-6, rtol=0)


def test_gae_whitening_is_masked_whiten_of_raw():
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(4, 6, generator=g) > 0.3
    mask[:, 0] = True
    inp = AdvantageInputs(torch.randn(4, 1, generator=g), mask, T3([0, 0, 1, 1]), values=torch.randn(4, 6, generator=g))
    raw = build("advantage", "gae", gamma=0.95, lam=0.9, whiten=False)(inp)
    white = build("advantage", "gae", gamma=0.95, lam=0.9)(inp)
    torch.testing.assert_close(white.advantages, masked_whiten(raw.advantages, mask) * mask)
    assert torch.equal(white.returns, raw.returns)  # returns come from the un-whitened advantages
    # whitened: mean 0 and unbiased variance 1 over trained tokens
    assert white.advantages[mask].mean().abs() < 1e-5
    assert white.advantages[mask].var(correction=1) == pytest.approx(1.0, abs=1e-4)


def test_gae_needs_values():
    with pytest.raises(BatchError, match="values"):
        build("advantage", "gae")(one_row([0, 0, 1]))


def test_gae_rejects_unknown_returns():
    with pytest.raises(ValueError, match="returns"):
        build("advantage", "gae", returns="td")


# --- reinforce_pp -----------------------------------------------------------------------------

def test_reinforce_pp_golden():
    # Scores (1, 0); row 0 has 2 trained tokens, row 1 one. Outcome on the last trained token:
    # token rewards row 0 (0, 1), row 1 (0, ·). γ = 0.5: returns row 0 (0.5, 1), row 1 (0, 0).
    # Trained returns (0.5, 1, 0): mean 0.5, unbiased var (0 + 0.25 + 0.25)/2 = 0.25, sd 0.5
    # → A = row 0 (0, 1), row 1 (−1, 0).
    inp = AdvantageInputs(T3([[1.0], [0.0]]), T3([[True, True], [True, False]]), T3([0, 0]))
    out = build("advantage", "reinforce_pp", gamma=0.5)(inp)
    torch.testing.assert_close(out.returns, T3([[0.5, 1.0], [0.0, 0.0]]))
    torch.testing.assert_close(out.advantages, T3([[0.0, 1.0], [-1.0, 0.0]]), atol=1e-6, rtol=0)


def test_reinforce_pp_returns_equal_gae_with_zero_values():
    # G_t = Σ γ^l r_{t+l} is GAE with V ≡ 0 and λ = 1 (same skipping of untrained tokens).
    g = torch.Generator().manual_seed(2)
    mask = torch.rand(3, 5, generator=g) > 0.3
    mask[:, 0] = True
    tr = torch.randn(3, 5, generator=g)
    inp = AdvantageInputs(torch.zeros(3, 1), mask, T3([0, 1, 1]), token_rewards=tr, values=torch.zeros(3, 5))
    rpp = build("advantage", "reinforce_pp", gamma=0.8)(inp)
    gae = build("advantage", "gae", gamma=0.8, lam=1.0)(inp)
    torch.testing.assert_close(rpp.returns, gae.returns)
    torch.testing.assert_close(rpp.advantages, gae.advantages)


def test_outcome_token_rewards_golden():
    # The score goes on each row's last trained token (verl); a row with no trained token gets none.
    mask = T3([[True, True, False], [True, False, True], [False, False, False]])
    inp = AdvantageInputs(T3([[2.0], [3.0], [4.0]]), mask, T3([0, 0, 1]))
    expected = T3([[0.0, 2.0, 0.0], [0.0, 0.0, 3.0], [0.0, 0.0, 0.0]])
    assert torch.equal(outcome_token_rewards(inp), expected)
