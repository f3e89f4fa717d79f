"""CVPO (docs/methods.md §2.14): reductions to the parent, hand-derived variance factors, and the curriculum
selector (weights peak at p*, batch mean 1, EMA, deterministic selection, state)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlvr import AdvantageInputs, build
from rlvr.advantages.cvpo import token_value_variance
from rlvr.selection.curriculum import curriculum_weights
from rlvr.types import Problem


def batch(values) -> AdvantageInputs:
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]]).bool()
    return AdvantageInputs(rewards=torch.tensor([[1.0], [0.0], [1.0]]), mask=mask,
                           group_ids=torch.tensor([0, 1, 2]), values=torch.as_tensor(values, dtype=torch.float32))


VARIED = [[0.0, 0.5, 1.0, 7.0], [0.2, 0.2, 0.6, 0.6], [0.3, 0.3, 9.0, 9.0]]


def test_zero_value_variance_equals_the_parent():
    # V constant along every row → ν ≡ 0 → ν̃ ≡ 1 (no exploration signal) → factor 1.
    inp = batch([[0.4] * 4, [0.7] * 4, [0.1] * 4])
    for parent in ("la_gae", "gae"):
        out = build("advantage", "cvpo", parent=parent)(inp)
        torch.testing.assert_close(out.advantages, build("advantage", parent)(inp).advantages)
        torch.testing.assert_close(out.returns, build("advantage", parent)(inp).returns)


def test_zero_kappa_equals_the_parent():
    inp = batch(VARIED)
    out = build("advantage", "cvpo", kappa_pos=0.0, kappa_neg=0.0)(inp)
    torch.testing.assert_close(out.advantages, build("advantage", "la_gae")(inp).advantages)


def test_variance_factors_golden():
    # Population variances over trained tokens: row 0 (0, 0.5, 1) → ν = 1/6; row 1 (0.2, 0.2, 0.6, 0.6)
    # → 0.04; row 2 (0.3, 0.3) → 0 (constant along the row). mean ν = (1/6 + 0.04 + 0)/3 = 0.0688889.
    # ν̃ = (2.419355, 0.580645, 0). κ = 0.2:
    #   row 0 correct:   1 + 0.2·1.419355 = 1.283871;
    #   row 1 incorrect: 1 − 0.2·(−0.419355) = 1.083871;
    #   row 2 correct:   1 + 0.2·(−1) = 0.8 (constant value → ν = 0 → factor 1 − κ₊).
    inp = batch(VARIED)
    torch.testing.assert_close(token_value_variance(inp.values, inp.mask), torch.tensor([1 / 6, 0.04, 0.0]))
    parent = build("advantage", "la_gae")(inp).advantages
    out = build("advantage", "cvpo")(inp)
    factor = torch.tensor([1.283871, 1.083871, 0.8]).unsqueeze(-1)
    torch.testing.assert_close(out.advantages, parent * factor, rtol=1e-5, atol=1e-6)
    assert float(out.metrics["value_var_mean"]) == pytest.approx(0.0688889, abs=1e-6)


def test_factor_is_clipped():
    # κ₊ = 1: row 0 would get 1 + 1.419355 = 2.42 → clipped to 1.5; row 2: 1 + (−1) = 0 → 0.5.
    inp = batch(VARIED)
    out = build("advantage", "cvpo", kappa_pos=1.0, kappa_neg=0.0)(inp)
    parent = build("advantage", "la_gae")(inp).advantages
    torch.testing.assert_close(out.advantages, parent * torch.tensor([1.5, 1.0, 0.5]).unsqueeze(-1))
    assert float(out.metrics["cvpo_factor_clipped"]) == pytest.approx(2 / 3)


def test_values_at_untrained_positions_change_nothing():
    inp = batch(VARIED)
    noisy = dataclasses.replace(inp, values=torch.where(inp.mask, inp.values, torch.full_like(inp.values, -50.0)))
    est = build("advantage", "cvpo")
    torch.testing.assert_close(est(noisy).advantages, est(inp).advantages)


# --- curriculum ------------------------------------------------------------------------------------

def test_curriculum_weights_peak_at_p_star_and_have_mean_one():
    # p* = 0.5, τ = 0.25: ω(0.5) = 1, ω(0.25) = ω(0.75) = exp(−0.5) = 0.606531, ω(0) = exp(−2) = 0.135335.
    p = torch.tensor([0.0, 0.25, 0.5, 0.75])
    w = curriculum_weights(p, 0.5, 0.25)
    raw = torch.tensor([0.135335, 0.606531, 1.0, 0.606531])
    torch.testing.assert_close(w, raw / raw.mean(), rtol=1e-5, atol=1e-6)
    assert float(w.mean()) == pytest.approx(1.0)
    assert int(w.argmax()) == 2


def test_curriculum_sampling_mode_learns_success_and_prefers_matched_questions():
    task = build("task", "arithmetic")
    sel = build("selector", "curriculum", ema_decay=0.5, pool_factor=4, apply="sampling", prior=0.5)
    first = sel.select(task, 8, step=0, seed=11)
    assert [p.uid for p in first] == [p.uid for p in sel.select(task, 8, step=0, seed=11)]  # reproducible
    pool = task.problems(32, seed=11)
    solved, matched = pool[:16], pool[16:]
    # EMA from the prior 0.5 with d = 0.5: solved (one row, r = 1) → 0.75; two rows r = (1, 0) → 0.5.
    rewards = torch.tensor([[1.0]] * 16 + [[1.0], [0.0]] * 16)
    sel.observe({"problems": solved + [q for q in matched for _ in range(2)], "rewards": rewards})
    assert sel.success[solved[0].uid] == pytest.approx(0.75) and sel.success[matched[0].uid] == pytest.approx(0.5)
    for _ in range(3):  # solved questions drift to p ≈ 1, far from p* = 0.5
        sel.observe({"problems": solved, "rewards": torch.ones(16, 1)})
    picks = {p.uid for p in sel.select(task, 8, step=1, seed=11)}
    assert len(picks & {p.uid for p in matched}) >= 7  # ω(0.97) ≈ 0.17 vs ω(0.5) = 1
    again = build("selector", "curriculum", ema_decay=0.5, pool_factor=4, apply="sampling", prior=0.5)
    again.load_state_dict(sel.state_dict())
    assert [p.uid for p in again.select(task, 8, step=2, seed=5)] == [p.uid for p in sel.select(task, 8, step=2, seed=5)]


def test_curriculum_loss_weights_golden_and_observe_commits_them():
    # d = 0.5, p* = 0.5, τ = 0.25, no prior. Question a seen before with p = 1.0; b, c unseen.
    # Rows: a (1, 1), b (1, 0), c (0, 0). p_a = 0.5·1 + 0.5·1 = 1; p_b = 0.5 (first visit: its own
    # mean); p_c = 0. Raw ω = exp(−0.25/0.125) = e^−2, 1, e^−2; mean (1 + 2e^−2)/3 → normalised
    # ω_a = ω_c = 3e^−2/(1 + 2e^−2) = 0.318886, ω_b = 3/(1 + 2e^−2) = 2.356228 (mean 1 over questions).
    sel = build("selector", "curriculum", ema_decay=0.5)
    sel.load_state_dict({"success": {"a": 1.0}})
    probs = [Problem("a", uid="a")] * 2 + [Problem("b", uid="b")] * 2 + [Problem("c", uid="c")] * 2
    fb = {"problems": probs, "rewards": torch.tensor([[1.0], [1.0], [1.0], [0.0], [0.0], [0.0]])}
    low, high = 3 * math.exp(-2) / (1 + 2 * math.exp(-2)), 3 / (1 + 2 * math.exp(-2))
    torch.testing.assert_close(sel.row_weights(fb), torch.tensor([low, low, high, high, low, low]))
    sel.observe(fb)
    assert sel.success == pytest.approx({"a": 1.0, "b": 0.5, "c": 0.0})
    # sampling mode logs no loss weight; the old prior makes an unseen question the most favoured
    assert build("selector", "curriculum", ema_decay=0.5, apply="sampling").row_weights(fb) is None


def test_curriculum_sampling_without_prior_treats_unseen_as_average():
    # seen: a (p = 0.5, ω = 1) and z (p = 1, ω = e^−2); unseen u gets their mean (1 + e^−2)/2, never the top.
    sel = build("selector", "curriculum", ema_decay=0.5, apply="sampling")
    sel.load_state_dict({"success": {"a": 0.5, "z": 1.0}})
    w = sel._sampling_weights([Problem("a", uid="a"), Problem("z", uid="z"), Problem("u", uid="u")])
    assert w == pytest.approx([1.0, math.exp(-2), (1 + math.exp(-2)) / 2])


def test_curriculum_loss_mode_fixed_pool_draws_uniformly_and_reproducibly():
    task = build("task", "arithmetic")
    sel = build("selector", "curriculum", ema_decay=0.5, pool_size=6)
    a = [p.uid for p in sel.select(task, 4, step=0, seed=3)]
    assert a == [p.uid for p in sel.select(task, 4, step=0, seed=3)] and len(set(a)) == 4
    assert set(a) <= {p.uid for p in task.problems(6, seed=0)}
    stream = build("selector", "curriculum", ema_decay=0.5)  # pool_size 0: the task's fresh problems (uniform)
    assert [p.uid for p in stream.select(task, 4, 0, 9)] == [p.uid for p in task.problems(4, seed=9)]


def test_curriculum_requires_an_ema_decay():
    with pytest.raises(ValueError, match="ema_decay is required"):
        build("selector", "curriculum")
