"""Cliff (docs/methods.md §2.3): the four tests listed there as golden tests (step lengths [3, 4, 5] with k = 2;
no mistakes + mode group = grpo; replace has no positive suffix / negative prefix; padding is 0),
the group-mode magnitudes, metrics, invariance and errors. Expected numbers are derived by hand in
the comment above each assertion."""

from __future__ import annotations

import inspect

import pytest
import torch

from rlvr import AdvantageInputs, build
from rlvr.registry import entries
from rlvr.types import BatchError

S2 = 0.5 / (0.5**0.5 + 1e-6)  # GRPO Â of a group (1, 0): ±0.5/(std + eps), std = sqrt(0.5²·2/1) = 0.70711


def inputs(rewards, groups, first, mask=None, t=12, **kw) -> AdvantageInputs:
    r = torch.tensor(rewards, dtype=torch.float32).unsqueeze(1)
    m = torch.ones(len(rewards), t, dtype=torch.bool) if mask is None else torch.tensor(mask)
    fm = None if first is None else torch.tensor(first, dtype=torch.long)
    return AdvantageInputs(rewards=r, mask=m, group_ids=torch.tensor(groups), first_mistake=fm, **kw)


def run(inp: AdvantageInputs, name: str = "cliff", **params):
    return build("advantage", name, **params)(inp)


# --- docs/methods.md §2.3 test 1: step lengths [3, 4, 5], k = 2 → m = 3 ---------------------------------

def test_golden_step_lengths_3_4_5_replace():
    # Steps occupy tokens 0..2, 3..6, 7..11; the 2nd step (1-based k = 2) is the first wrong one, so
    # m = 3 (its first token). replace, a_pos = a_neg = 1: tokens 0..2 → +1, tokens 3..11 → −1.
    out = run(inputs([0.0], [0], [3]), mode="replace").advantages
    torch.testing.assert_close(out[0], torch.tensor([1.0] * 3 + [-1.0] * 9), rtol=0, atol=0)


def test_golden_step_lengths_3_4_5_group():
    # Group (1, 0): Â = (+S2, −S2), S2 = 0.5/(0.70711 + 1e-6) ≈ 0.70711 (unbiased std).
    # Row 0 is right with no mistake (∅) → Â_0 = +S2 on every token.
    # Row 1 is wrong with m = 3 → |Â_1| = S2 on tokens 0..2 and −S2 on 3..11: the correct prefix of a
    # wrong answer is now reinforced instead of penalised.
    out = run(inputs([1.0, 0.0], [0, 0], [-1, 3])).advantages
    s = S2
    torch.testing.assert_close(out[0], torch.full((12,), s))
    torch.testing.assert_close(out[1], torch.tensor([s] * 3 + [-s] * 9))


def test_group_mode_magnitudes_scale_the_two_sides():
    # a_pos = 0.5, a_neg = 2 in group mode: |Â|·0.5 on the prefix, −|Â|·2 from the mistake on.
    # Group (1, 0), m = (1, 2): row 0 (Â = +s): [0.5s, −2s, −2s]; row 1 (Â = −s): [0.5s, 0.5s, −2s].
    out = run(inputs([1.0, 0.0], [0, 0], [1, 2], t=3), a_pos=0.5, a_neg=2.0).advantages
    s = S2
    torch.testing.assert_close(out, torch.tensor([[0.5 * s, -2 * s, -2 * s], [0.5 * s, 0.5 * s, -2 * s]]))


# --- docs/methods.md §2.3 test 2: no mistakes + mode group == grpo exactly ---------------------------------

@pytest.mark.parametrize("params", [{}, {"scale": "batch"}, {"std_power": 0.0}, {"ddof": 0, "eps": 1e-4},
                                    {"singleton": "zero"}])
def test_no_mistake_group_mode_is_grpo_exactly(params):
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(9, 1, generator=g)
    mask = torch.rand(9, 5, generator=g) > 0.3
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 3])  # row 8 alone: the singleton rule applies
    base = dict(rewards=rewards, mask=mask, group_ids=groups)
    cliff = run(AdvantageInputs(**base, first_mistake=torch.full((9,), -1)), **params).advantages
    grpo = run(AdvantageInputs(**base), "grpo", **params).advantages
    assert torch.equal(cliff, grpo)
    assert grpo.abs().sum() > 0  # the comparison is not between two zero tensors


# --- docs/methods.md §2.3 test 3: replace has no positive suffix token and no negative prefix token ------

def test_replace_signs_split_at_the_mistake():
    # Rows with m = 0, 2, 4, ∅ over T = 4, a_pos = 0.5, a_neg = 2:
    #   m = 0 → all −2; m = 2 → [.5, .5, −2, −2]; m = 4 is not allowed (T = 4), so m = 3 → [.5 ×3, −2];
    #   ∅ → all +0.5 even though its reward is 0 (the teacher's verdict replaces the outcome).
    inp = inputs([1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], [0, 2, 3, -1], t=4)
    out = run(inp, mode="replace", a_pos=0.5, a_neg=2.0).advantages
    expected = torch.tensor([[-2.0] * 4, [0.5, 0.5, -2, -2], [0.5, 0.5, 0.5, -2], [0.5] * 4])
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    t = torch.arange(4).expand(4, 4)
    m = torch.tensor([0, 2, 3, 10])[:, None]
    assert not (out[t >= m] > 0).any() and not (out[t < m] < 0).any()


# --- docs/methods.md §2.3 test 4: padding tokens have adv = 0 ----------------------------------------------

@pytest.mark.parametrize("mode", ["group", "replace"])
def test_padding_tokens_are_zero(mode):
    # Row 0 has 2 real tokens of 4, m = 1; row 1 has 3 real tokens, m = 3 falls on padding (→ no
    # trained suffix token). Every untrained position is exactly 0, every trained one is not.
    mask = [[True, True, False, False], [True, True, True, False]]
    out = run(inputs([1.0, 0.0], [0, 0], [1, 3], mask=mask, t=4), mode=mode).advantages
    m = torch.tensor(mask)
    assert torch.equal(out[~m], torch.zeros(int((~m).sum())))
    assert (out[m] != 0).all()
    assert (out[1, :3] > 0).all()  # the mistake is past the trained tokens: only the prefix is trained


# --- metrics, invariance, config and errors --------------------------------------------------------

def test_metrics_golden():
    # Rows: m = 3 of 12 trained tokens → 3/12 = 0.25; m = 6 → 0.5; two ∅ rows.
    # mistake_frac = 2/4 = 0.5; mistake_pos_frac = mean(0.25, 0.5) = 0.375.
    out = run(inputs([1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], [3, -1, 6, -1]))
    assert float(out.metrics["mistake_frac"]) == pytest.approx(0.5)
    assert float(out.metrics["mistake_pos_frac"]) == pytest.approx(0.375)
    assert "zero_std_frac" in out.metrics  # grpo's metrics come along in group mode


def test_row_permutation_permutes_advantages():
    inp = inputs([1.0, 0.0, 0.0, 1.0, 0.5], [0, 0, 1, 1, 1], [2, 5, -1, 0, 7])
    perm = torch.tensor([3, 0, 4, 1, 2])
    shuffled = AdvantageInputs(rewards=inp.rewards[perm], mask=inp.mask[perm], group_ids=inp.group_ids[perm],
                               first_mistake=inp.first_mistake[perm])
    for mode in ("group", "replace"):
        torch.testing.assert_close(run(shuffled, mode=mode).advantages, run(inp, mode=mode).advantages[perm])


def test_missing_first_mistake_is_a_clear_error():
    with pytest.raises(BatchError, match="first_mistake"):
        run(inputs([1.0, 0.0], [0, 0], None))


@pytest.mark.parametrize("first, match", [
    (torch.tensor([0, 1, 2]), "shape"),
    (torch.tensor([0.0, 1.0]), "integer"),
    (torch.tensor([-2, 0]), "out of range"),
    (torch.tensor([0, 12]), "out of range"),  # T = 12: index 12 does not exist
])
def test_bad_first_mistake_is_rejected(first, match):
    with pytest.raises(BatchError, match=match):
        AdvantageInputs(rewards=torch.zeros(2, 1), mask=torch.ones(2, 12, dtype=torch.bool),
                        group_ids=torch.tensor([0, 0]), first_mistake=first)


@pytest.mark.parametrize("params", [{"mode": "both"}, {"a_pos": -1.0}, {"a_neg": -0.5}, {"scale": "row"}])
def test_bad_config_is_rejected(params):
    with pytest.raises(ValueError):
        build("advantage", "cliff", **params)


def test_registered_with_reconstruction_docstring_and_teacher_flag():
    entry = next(e for e in entries("advantage") if e.name == "cliff")
    assert entry.cls.needs_first_mistake is True
    assert "arXiv" in entry.paper
    doc = inspect.getdoc(entry.cls)
    for word in ("RECONSTRUCTION", "form", "magnitudes", "combination rule", "Differs from grpo:", "Shapes:"):
        assert word in doc
