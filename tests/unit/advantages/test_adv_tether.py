"""TETHER (docs/methods.md §2.8): the two ends of the tether (RLOO, pure critic), the explained-variance
weight (hand-derived, and its 0 / 1 limits), the EMA and its state, and masking."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlvr import AdvantageInputs, build


def batch(values=None) -> AdvantageInputs:
    # Two groups: rows 0-2 (r = 1, 0, 0) and rows 3-4 (r = 1, 1); row 1 has an untrained last token.
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1]]).bool()
    v = torch.tensor([[0.2, 0.4, 0.6], [0.1, 0.3, 0.0], [0.5, 0.5, 0.5], [0.9, 0.8, 0.7], [0.6, 0.6, 0.6]])
    return AdvantageInputs(rewards=torch.tensor([[1.0], [0.0], [0.0], [1.0], [1.0]]), mask=mask,
                           group_ids=torch.tensor([0, 0, 0, 1, 1]), values=v if values is None else values)


def test_w0_is_rloo_and_w1_is_the_pure_critic_advantage():
    inp = batch()
    zero = build("advantage", "tether", weight="fixed", fixed_weight=0.0)(inp)
    torch.testing.assert_close(zero.advantages, build("advantage", "rloo")(inp).advantages)
    one = build("advantage", "tether", weight="fixed", fixed_weight=1.0)(inp)
    expected = (inp.rewards - inp.values) * inp.mask  # r_i − V_{i,t} on trained tokens
    torch.testing.assert_close(one.advantages, expected)
    torch.testing.assert_close(one.returns, inp.rewards.expand(-1, 3) * inp.mask)  # MC targets r_i
    assert float(one.metrics["tether_w"]) == 1.0


def test_explained_variance_weight_golden():
    # Leave-one-out baselines: group 0 r = (1, 0, 0): b = (0, 0.5, 0.5); group 1 r = (1, 1): b = (1, 1).
    # Var_grp = mean((1−0)², (0−0.5)², (0−0.5)², 0, 0) = (1 + 0.25 + 0.25)/5 = 0.3.
    # Constant V ≡ 0.8 on 14 trained tokens: rows with r = 1 have 3+3+3 = 9 tokens of (0.2)² = 0.04,
    # rows with r = 0 have 2+3 = 5 tokens of 0.64: MSE = (9·0.04 + 5·0.64)/14 = 3.56/14 = 0.254286.
    # w = 1 − 0.254286/0.3 = 0.152381; row 0 token 0: A = 1 − (w·0.8 + (1 − w)·0) = 0.878095.
    inp = batch(torch.full((5, 3), 0.8))
    out = build("advantage", "tether")(inp)
    assert float(out.metrics["tether_var_grp"]) == pytest.approx(0.3)
    assert float(out.metrics["tether_mse_v"]) == pytest.approx(3.56 / 14)
    w = 1 - (3.56 / 14) / 0.3
    assert float(out.metrics["tether_w"]) == pytest.approx(w, abs=1e-6)
    assert float(out.advantages[0, 0]) == pytest.approx(1 - w * 0.8, abs=1e-6)
    # row 1 token 0 (r = 0, b_grp = 0.5): A = 0 − (w·0.8 + (1 − w)·0.5)
    assert float(out.advantages[1, 0]) == pytest.approx(-(w * 0.8 + (1 - w) * 0.5), abs=1e-6)


def test_exact_critic_gives_w1_and_a_bad_one_w0():
    inp = batch()
    exact = dataclasses.replace(inp, values=inp.rewards.expand(-1, 3).clone())  # V = r: MSE 0
    assert float(build("advantage", "tether")(exact).metrics["tether_w"]) == 1.0
    far = dataclasses.replace(inp, values=torch.full((5, 3), 5.0))  # MSE ≫ Var_grp = 0.3
    out = build("advantage", "tether")(far)
    assert float(out.metrics["tether_w"]) == 0.0
    torch.testing.assert_close(out.advantages, build("advantage", "rloo")(inp).advantages)


def test_ema_smooths_w_and_its_state_round_trips():
    # First batch: w = 1 (exact critic) is taken as is; second: w_batch = 0 → 0.9·1 + 0.1·0 = 0.9.
    inp = batch()
    exact = dataclasses.replace(inp, values=inp.rewards.expand(-1, 3).clone())
    far = dataclasses.replace(inp, values=torch.full((5, 3), 5.0))
    est = build("advantage", "tether", ema=True, ema_beta=0.9)
    assert float(est(exact).metrics["tether_w"]) == 1.0
    assert float(est(far).metrics["tether_w"]) == pytest.approx(0.9)
    again = build("advantage", "tether", ema=True, ema_beta=0.9)
    again.load_state_dict(est.state_dict())
    torch.testing.assert_close(again(far).advantages, est(far).advantages)


def test_values_at_untrained_positions_change_nothing():
    inp = batch()
    noisy = dataclasses.replace(inp, values=torch.where(inp.mask, inp.values, torch.full_like(inp.values, 99.0)))
    est = build("advantage", "tether")
    torch.testing.assert_close(est(noisy).advantages, est(inp).advantages)
    assert (est(inp).advantages[~inp.mask] == 0).all()
