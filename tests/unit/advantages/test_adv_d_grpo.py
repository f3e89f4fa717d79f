"""D-GRPO (docs/methods.md §2.21): golden planner/executor advantages, the reductions to grpo (tests 1),
zero-mean executor advantages within a plan (test 2), tied plans (test 3), role masks, ids that are
not contiguous, invariances, metrics and errors. Every expected number is derived in a comment."""

from __future__ import annotations

import pytest
import torch

from rlvr import AdvantageInputs, build
from rlvr.types import BatchError


def inputs(rewards, groups, plans=None, mask=None, roles=None, t: int = 3, **kw) -> AdvantageInputs:
    r = torch.tensor(rewards, dtype=torch.float32).unsqueeze(1)
    n = r.shape[0]
    return AdvantageInputs(
        rewards=r, group_ids=torch.tensor(groups),
        mask=torch.ones(n, t, dtype=torch.bool) if mask is None else torch.tensor(mask),
        plan_ids=None if plans is None else torch.tensor(plans),
        role_mask=None if roles is None else torch.tensor(roles), **kw)


def run(inp: AdvantageInputs, **params):
    return build("advantage", "d_grpo", **params)(inp)


# The worked example: one state (group 5), two plans, M = 2, rows interleaved:
#   rows  = (A1, B1, A2, B2), plan ids (10, 20, 10, 20), returns (1, 1, 0, 1).
#   V_A = mean(1, 0) = 0.5, V_B = mean(1, 1) = 1.
#   planner: mean V = 0.75, std (ddof 1) = sqrt((0.25² + 0.25²)/1) = sqrt(0.125) = 0.353553
#            A^P = (∓0.25)/0.353553 = (A: −0.707107, B: +0.707107).
#   executor: plan A: (1 − 0.5, 0 − 0.5)/std(1, 0) = (±0.5)/0.707107 = (+0.707107, −0.707107);
#             plan B: returns tie → A^E = 0 (test 3: the planner advantage of B is still +0.707).
# Tokens (T = 3): token 0 is the plan, tokens 1–2 the execution; token 2 of row 1 is padding.
ROLES = [[True, False, False]] * 4
MASK = [[True, True, True], [True, True, False], [True, True, True], [True, True, True]]
A = 0.7071068  # 0.25/0.3535534 and 0.5/0.7071068 (eps 1e-6 changes the 6th decimal only)


def example(**kw) -> AdvantageInputs:
    return inputs([1.0, 1.0, 0.0, 1.0], [5, 5, 5, 5], plans=[10, 20, 10, 20], mask=MASK, roles=ROLES, **kw)


def test_golden_planner_and_executor_tokens():
    adv = run(example()).advantages
    expected = torch.tensor([[-A, A, A],     # A1: plan token A^P_A, execution tokens A^E = +0.707
                             [A, 0.0, 0.0],  # B1: A^P_B, tied plan → 0; last token masked → 0
                             [-A, -A, -A],   # A2: A^P_A, A^E = −0.707
                             [A, 0.0, 0.0]])  # B2
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=0)


def test_golden_norm_none():
    # norm='none' keeps the centred values: A^P = V − mean V = (−0.25, +0.25);
    # A^E = R − V_i = (+0.5, 0, −0.5, 0).
    adv = run(example(), norm="none").advantages
    expected = torch.tensor([[-0.25, 0.5, 0.5], [0.25, 0.0, 0.0], [-0.25, -0.5, -0.5], [0.25, 0.0, 0.0]])
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)


def test_metrics_golden():
    m = run(example()).metrics
    # planner over plans: (−0.707, +0.707) → mean 0, |.| mean 0.707;
    # executor over rows: (0.707, 0, −0.707, 0) → mean 0, |.| mean 1.414/4 = 0.353553.
    assert float(m["planner_adv_mean"]) == pytest.approx(0.0, abs=1e-6)
    assert float(m["planner_adv_abs_mean"]) == pytest.approx(A, abs=1e-5)
    assert float(m["executor_adv_mean"]) == pytest.approx(0.0, abs=1e-6)
    assert float(m["executor_adv_abs_mean"]) == pytest.approx(A / 2, abs=1e-5)
    assert float(m["num_plans"]) == 2.0
    assert float(m["tied_plan_frac"]) == 0.5  # plan B of the two multi-execution plans
    # 11 trained tokens (12 − 1 padding), 4 of them planner tokens
    assert float(m["planner_token_frac"]) == pytest.approx(4 / 11)


def test_untagged_choices_without_role_mask():
    # untagged='executor' puts A^E on every trained token, 'sum' puts A^P + A^E:
    #   A1: −0.707 + 0.707 = 0; B1: 0.707 + 0; A2: −0.707 − 0.707 = −1.414; B2: 0.707.
    base = dict(rewards=[1.0, 1.0, 0.0, 1.0], groups=[5, 5, 5, 5], plans=[10, 20, 10, 20], t=1)
    ex = run(inputs(**base), untagged="executor").advantages[:, 0]
    torch.testing.assert_close(ex, torch.tensor([A, 0.0, -A, 0.0]), atol=1e-5, rtol=0)
    total = run(inputs(**base), untagged="sum").advantages[:, 0]
    torch.testing.assert_close(total, torch.tensor([0.0, A, -2 * A, A]), atol=1e-5, rtol=0)
    planner = run(inputs(**base)).advantages[:, 0]
    torch.testing.assert_close(planner, torch.tensor([-A, A, -A, A]), atol=1e-5, rtol=0)


# --- docs/methods.md §2.21 test 1: M = 1 → GRPO on returns --------------------------------------------------

def test_m1_equals_grpo_golden():
    # Two states: group 0 returns (1, 0, 0, 0): mean 0.25, std sqrt((0.5625 + 3·0.0625)/3) = 0.5
    #   → A = (1.5, −0.5, −0.5, −0.5); group 1 returns (1, 1): std 0 → A = 0.
    # Each row is its own plan (ids 7, 3, 9, 1, 4, 8: distinct, not sorted) so A^P is GRPO;
    # the executor tokens get 0 (a plan of one execution has no within-plan contrast).
    inp = inputs([1.0, 0.0, 0.0, 0.0, 1.0, 1.0], [0, 0, 0, 0, 1, 1], plans=[7, 3, 9, 1, 4, 8],
                 roles=[[True, False, False]] * 6)
    adv = run(inp).advantages
    grpo_a = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.0, 0.0])
    torch.testing.assert_close(adv[:, 0], grpo_a, atol=1e-5, rtol=0)
    assert torch.equal(adv[:, 1:], torch.zeros(6, 2))


@pytest.mark.parametrize("params, parent", [
    ({}, {"name": "grpo"}),
    ({"norm": "none"}, {"name": "dr_grpo"}),
    ({"ddof": 0, "eps": 1e-4}, {"name": "grpo", "ddof": 0, "eps": 1e-4}),
    ({"singleton": "zero"}, {"name": "grpo", "singleton": "zero"}),
])
def test_flat_batch_is_exactly_grpo(params, parent):
    # No plan_ids, no role_mask (the flat testbed): every row is its own plan and every token a
    # planner token, so D-GRPO is its parent bit for bit, a singleton group (row 5) included.
    torch.manual_seed(0)
    r = torch.rand(6, 1)
    mask = torch.rand(6, 4) > 0.3
    inp = AdvantageInputs(rewards=r, mask=mask, group_ids=torch.tensor([3, 1, 3, 1, 3, 8]))
    name = parent.pop("name")
    expected = build("advantage", name, **parent)(inp).advantages
    assert torch.equal(run(inp, **params).advantages, expected)


def test_one_plan_per_state_executor_is_grpo():
    # "Identical plans": G = 1 plan per state with M = 4 executions → the executor advantages are
    # GRPO on the returns of the state: (1, 0, 0, 0) → (1.5, −0.5, −0.5, −0.5) as above.
    inp = inputs([1.0, 0.0, 0.0, 0.0], [2, 2, 2, 2], plans=[6, 6, 6, 6], t=1)
    out = run(inp, untagged="executor").advantages[:, 0]
    torch.testing.assert_close(out, torch.tensor([1.5, -0.5, -0.5, -0.5]), atol=1e-5, rtol=0)


# --- docs/methods.md §2.21 tests 2 and 3 ----------------------------------------------------------------------

@pytest.mark.parametrize("norm", ["grpo", "none"])
def test_executor_zero_mean_within_each_plan(norm):
    torch.manual_seed(1)
    groups = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1, 0, 0])
    plans = torch.tensor([0, 3, 1, 3, 0, 4, 1, 4, 0, 2])  # plans of 3, 2, 1 rows; state 1: two of 2
    inp = AdvantageInputs(rewards=torch.rand(10, 1), mask=torch.ones(10, 1, dtype=torch.bool),
                          group_ids=groups, plan_ids=plans)
    a_exec = run(inp, norm=norm, untagged="executor").advantages[:, 0]
    a_plan = run(inp, norm=norm).advantages[:, 0]
    assert a_exec.abs().sum() > 0.1  # not trivially zero
    for p in plans.unique():
        assert float(a_exec[plans == p].sum()) == pytest.approx(0.0, abs=1e-5)
    # the planner advantages (one per plan) also sum to 0 across the plans of each state
    for g in groups.unique():
        first = [int((plans == p).nonzero()[0]) for p in plans[groups == g].unique()]
        assert float(a_plan[first].sum()) == pytest.approx(0.0, abs=1e-5)


def test_tied_plan_executor_zero_planner_nonzero_even_with_eps_zero():
    # Plan 1 ties (1, 1), plan 2 = (0, 1): V = (1, 0.5); A^P = ±0.25/0.353553 = ±0.707;
    # plan 1's executor advantages are 0, also with eps = 0 (no 0/0).
    inp = inputs([1.0, 1.0, 0.0, 1.0], [0, 0, 0, 0], plans=[1, 1, 2, 2], t=1)
    out = run(inp, untagged="executor", eps=0.0).advantages[:, 0]
    assert torch.equal(out[:2], torch.zeros(2))
    planner = run(inp, eps=0.0).advantages[:, 0]
    torch.testing.assert_close(planner, torch.tensor([A, A, -A, -A]), atol=1e-5, rtol=0)


# --- layout, masks, invariances ---------------------------------------------------------------

def test_row_permutation_and_relabelling_are_equivariant():
    inp = example()
    perm = torch.tensor([3, 0, 2, 1])
    moved = AdvantageInputs(rewards=inp.rewards[perm], mask=inp.mask[perm], group_ids=inp.group_ids[perm] * 7 - 2,
                            plan_ids=inp.plan_ids[perm] * -3 + 100, role_mask=inp.role_mask[perm])
    torch.testing.assert_close(run(moved).advantages, run(inp).advantages[perm])


def test_masked_tokens_are_zero_even_on_planner_positions():
    mask = [[False, True, True], [True, False, False], [False, False, False], [True, True, True]]
    roles = [[True, True, False]] * 4
    adv = run(inputs([1.0, 1.0, 0.0, 1.0], [5, 5, 5, 5], plans=[10, 20, 10, 20], mask=mask, roles=roles)).advantages
    assert torch.equal(adv[~torch.tensor(mask)], torch.zeros(6))  # 1 + 2 + 3 + 0 untrained tokens
    assert adv[3, 0] != 0 and adv[0, 1] != 0  # trained planner tokens keep their advantage


def test_shift_and_scale_invariance_with_grpo_norm():
    base = run(example()).advantages
    r = example().rewards
    shifted = AdvantageInputs(rewards=3.0 * r - 2.0, mask=torch.tensor(MASK), group_ids=torch.tensor([5] * 4),
                              plan_ids=torch.tensor([10, 20, 10, 20]), role_mask=torch.tensor(ROLES))
    torch.testing.assert_close(run(shifted).advantages, base, atol=1e-5, rtol=0)


def test_token_rewards_are_the_returns_when_given():
    # dense rewards summing to (1, 1, 0, 1) on trained tokens give the same advantages
    dense = torch.zeros(4, 3)
    dense[0, 2] = 1.0
    dense[1, 0], dense[1, 1] = 0.5, 0.5
    dense[3, 1] = 1.0
    inp = example(token_rewards=dense)
    inp.rewards.zero_()  # ignored when token_rewards are given
    torch.testing.assert_close(run(inp).advantages, run(example()).advantages)


def test_singleton_state_planner_raw_or_zero():
    # a state with one plan (group 4: plan 9, returns (1, 0)): 'raw' gives A^P = V/(1 + eps) = 0.5
    # (mean 0, std 1, as grpo), 'zero' gives 0
    inp = inputs([1.0, 0.0], [4, 4], plans=[9, 9], t=1)
    torch.testing.assert_close(run(inp).advantages[:, 0], torch.tensor([0.5, 0.5]) / (1 + 1e-6))
    assert run(inp, singleton="zero").advantages[:, 0].tolist() == [0.0, 0.0]


# --- errors -----------------------------------------------------------------------------------

def test_plan_crossing_groups_is_an_error():
    with pytest.raises(BatchError, match="plan 10 has rows in groups 0 and 1"):
        run(inputs([1.0, 0.0, 1.0], [0, 1, 1], plans=[10, 10, 11], t=1))


@pytest.mark.parametrize("kw, match", [
    ({"plan_ids": torch.tensor([0, 1])}, "plan_ids has shape"),
    ({"plan_ids": torch.tensor([0.0, 1.0, 2.0])}, "plan_ids must be an integer"),
    ({"role_mask": torch.ones(3, 2, dtype=torch.bool)}, "role_mask has shape"),
    ({"role_mask": torch.ones(3, 1)}, "role_mask must be a bool"),
])
def test_malformed_fields_are_named(kw, match):
    with pytest.raises(BatchError, match=match):
        AdvantageInputs(rewards=torch.zeros(3, 1), mask=torch.ones(3, 1, dtype=torch.bool),
                        group_ids=torch.tensor([0, 0, 1]), **kw)


def test_size_checks():
    inp = inputs([1.0, 0.0, 1.0, 0.0], [0, 0, 0, 0], plans=[1, 1, 2, 2], t=1)
    run(inp, plans=2, executions_per_plan=2)  # consistent: no error
    with pytest.raises(BatchError, match="executions_per_plan=3"):
        run(inp, executions_per_plan=3)
    with pytest.raises(BatchError, match="plans=4"):
        run(inp, plans=4)
    with pytest.raises(BatchError, match="executions_per_plan=2"):  # flat batch: M = 1
        run(inputs([1.0, 0.0], [0, 0], t=1), executions_per_plan=2)


@pytest.mark.parametrize("bad", [{"norm": "batch"}, {"plan_value": "max"}, {"untagged": "both"},
                                 {"singleton": "drop"}, {"ddof": -1}, {"plans": -1}, {"eps": -1.0}])
def test_bad_config_is_rejected(bad):
    with pytest.raises(ValueError, match="d_grpo"):
        build("advantage", "d_grpo", **bad)
