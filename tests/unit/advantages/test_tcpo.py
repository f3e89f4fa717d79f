"""TCPO turn-level credit (docs/methods.md §2.16): golden three-turn trajectory, the section's tests, the
counterfactual replacement, the turn selector, and the one-turn reduction to grpo."""

from __future__ import annotations

import pytest
import torch

from rlvr.advantages.tcpo import (hindsight_credit, retrospective_credit, select_counterfactual_turns,
                                  turn_spans)
from rlvr.registry import build
from rlvr.types import AdvantageInputs

NAN = float("nan")
# One trajectory of three turns over T = 8 positions: turn 1 = tokens 0-1, (2 = env), turn 2 = token 3,
# (4-5 = env), turn 3 = tokens 6-7. The score s_j sits on the turn's last token.
MASK = torch.tensor([[True, True, False, True, False, False, True, True]])


def _inputs(scores: list[float], baselines: dict[int, float] | None = None, mask: torch.Tensor = MASK,
            groups: list[int] | None = None) -> AdvantageInputs:
    tr = torch.zeros(mask.shape)
    spans = turn_spans(mask[0])
    for (_, end), s in zip(spans, scores):
        tr[0, end - 1] = s
    tb = None
    if baselines is not None:
        tb = torch.full(mask.shape, NAN)
        for j, b in baselines.items():
            tb[0, spans[j][0]] = b
    return AdvantageInputs(rewards=torch.tensor([[scores[-1]]]), mask=mask,
                           group_ids=torch.tensor(groups or [0]), token_rewards=tr, turn_baselines=tb)


def test_golden_three_turn_trajectory():
    # Scores [0.2, 0.1, 0.9], s_0 = 0, γ_h = 0.5 (docs/methods.md §2.16 test 2):
    #   best_<j = [0, 0.2, 0.2]; c^R = [0.2, −0.1, 0.7];
    #   turn 2 does not improve (c^R ≤ 0); turn 3 is the first later new best (0.9 > 0.2):
    #   c^H_2 = 0.5^(3−2)·max(0, 0.9 − 0.2) = 0.35; c^H_1 = c^H_3 = 0 (they improve).
    #   c = [0.2, 0.25, 0.7]. Normalised over the group's 3 turns (ddof 1, eps 0):
    #   mean = 1.15/3 = 0.383333; deviations [−0.183333, −0.133333, 0.316667];
    #   squares sum = 0.0336111 + 0.0177778 + 0.1002778 = 0.1516667; std = sqrt(0.1516667/2) = 0.2753785;
    #   A = [−0.665746, −0.484179, 1.149925] on the tokens of turns 1, 2, 3; 0 on env tokens.
    assert retrospective_credit([0.2, 0.1, 0.9], 0.0) == pytest.approx([0.2, -0.1, 0.7])
    assert hindsight_credit([0.2, 0.1, 0.9], 0.0, 0.5) == pytest.approx([0.0, 0.35, 0.0])
    out = build("advantage", "tcpo", eps=0.0)(_inputs([0.2, 0.1, 0.9]))
    a1, a2, a3 = -0.665746, -0.484179, 1.149925
    assert out.advantages[0].tolist() == pytest.approx([a1, a1, 0, a2, 0, 0, a3, a3], abs=1e-5)
    assert out.metrics["hindsight_frac"].item() == pytest.approx(1 / 3)
    assert out.metrics["turns_mean"].item() == 3.0
    # norm 'none' only centres: c − 0.383333
    flat = build("advantage", "tcpo", norm="none")(_inputs([0.2, 0.1, 0.9])).advantages[0]
    assert flat[[0, 3, 6]].tolist() == pytest.approx([-0.183333, -0.133333, 0.316667], abs=1e-5)


def test_monotone_improvement_has_positive_retro_credit_and_no_hindsight():
    # docs/methods.md §2.16 test 1: [0.1, 0.4, 0.8] → c^R = [0.1, 0.3, 0.4] all > 0, c^H = 0.
    assert retrospective_credit([0.1, 0.4, 0.8], 0.0) == pytest.approx([0.1, 0.3, 0.4])
    assert hindsight_credit([0.1, 0.4, 0.8], 0.0, 0.5) == [0.0, 0.0, 0.0]
    out = build("advantage", "tcpo", norm="none")(_inputs([0.1, 0.4, 0.8]))
    assert out.metrics["hindsight_frac"].item() == 0.0
    # c − mean(c) with mean 0.266667
    assert out.advantages[0, [0, 3, 6]].tolist() == pytest.approx([-0.166667, 0.033333, 0.133333], abs=1e-5)


def test_hindsight_target_first_versus_best_later():
    # [0.5, 0.2, 0.6, 0.9], s_0 = 0: best_<j = [0, 0.5, 0.5, 0.6]; new bests at turns 1, 3, 4.
    # Turn 2 (c^R = −0.3): first later new best is turn 3: 0.5^1·(0.6 − 0.5) = 0.05;
    # best_later also weighs turn 4: max(0.05, 0.5^2·(0.9 − 0.5) = 0.1) = 0.1.
    assert hindsight_credit([0.5, 0.2, 0.6, 0.9], 0.0, 0.5) == pytest.approx([0, 0.05, 0, 0])
    assert hindsight_credit([0.5, 0.2, 0.6, 0.9], 0.0, 0.5, "best_later") == pytest.approx([0, 0.1, 0, 0])
    # no later new best → no hindsight; γ = 0 → none either
    assert hindsight_credit([0.5, 0.2, 0.3], 0.0, 0.5) == [0.0, 0.0, 0.0]
    assert hindsight_credit([0.2, 0.1, 0.9], 0.0, 0.0) == [0.0, 0.0, 0.0]


def test_counterfactual_baseline_replaces_retrospective_credit():
    # Turn 2 gets a counterfactual baseline 0.3: c^CF_2 = 0.1 − 0.3 = −0.2 replaces c^R_2 = −0.1; its
    # hindsight 0.35 still applies → c = [0.2, 0.15, 0.7]; norm 'none': mean 0.35 → [−0.15, −0.2, 0.35].
    out = build("advantage", "tcpo", norm="none")(_inputs([0.2, 0.1, 0.9], baselines={1: 0.3}))
    assert out.advantages[0, [0, 3, 6]].tolist() == pytest.approx([-0.15, -0.2, 0.35], abs=1e-6)
    assert out.metrics["cf_frac"].item() == pytest.approx(1 / 3)
    off = build("advantage", "tcpo", norm="none", counterfactual=False)(_inputs([0.2, 0.1, 0.9], baselines={1: 0.3}))
    assert off.advantages[0, [0, 3, 6]].tolist() == pytest.approx([-0.183333, -0.133333, 0.316667], abs=1e-5)


def test_one_turn_without_counterfactuals_is_grpo_on_the_score_gain():
    # docs/methods.md §2.16 test 3: J = 1 → grpo on s_1 − s_0 (s_0 is a constant, so grpo on s_1), same ddof/eps.
    mask = torch.tensor([[True, True, False], [True, False, False], [True, True, True],
                         [True, False, False], [True, True, False]])
    s = torch.tensor([0.2, 0.7, 0.5, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 1, 1])
    tr = torch.zeros(mask.shape)
    last = mask.sum(-1) - 1
    tr[torch.arange(5), last] = s
    inputs = AdvantageInputs(rewards=s[:, None], mask=mask, group_ids=groups, token_rewards=tr)
    got = build("advantage", "tcpo", initial_score=0.3)(inputs).advantages
    want = build("advantage", "grpo")(AdvantageInputs(rewards=s[:, None], mask=mask, group_ids=groups)).advantages
    assert torch.allclose(got, want, atol=1e-6)
    # without token_rewards every row is one turn scored by its reward: the same result
    plain = build("advantage", "tcpo")(AdvantageInputs(rewards=s[:, None], mask=mask, group_ids=groups)).advantages
    assert torch.allclose(plain, want, atol=1e-6)


def test_groups_normalise_separately_and_invariance_to_a_shift_of_all_scores():
    mask = torch.cat([MASK, MASK])
    tr = torch.zeros(mask.shape)
    tr[0, [1, 3, 7]] = torch.tensor([0.2, 0.1, 0.9])
    tr[1, [1, 3, 7]] = torch.tensor([0.3, 0.6, 0.4])
    adv = build("advantage", "tcpo")
    out = adv(AdvantageInputs(rewards=torch.zeros(2, 1), mask=mask, group_ids=torch.tensor([0, 1]), token_rewards=tr))
    for i in range(2):  # each group's turn credits are standardised on their own
        vals = out.advantages[i, [0, 3, 6]]
        assert vals.mean().item() == pytest.approx(0.0, abs=1e-6)
        assert vals.std().item() == pytest.approx(1.0, abs=1e-4)
    # adding a constant to every score and to s_0 leaves all credits unchanged
    shifted = tr + 0.5 * (tr != 0)
    tr_shift = tr.clone()
    tr_shift[tr != 0] = shifted[tr != 0]
    out2 = build("advantage", "tcpo", initial_score=0.5)(
        AdvantageInputs(rewards=torch.zeros(2, 1), mask=mask, group_ids=torch.tensor([0, 1]), token_rewards=tr_shift))
    assert torch.allclose(out.advantages, out2.advantages, atol=1e-5)


def test_turn_selector():
    groups = [0, 0, 1]
    surprisal = [[1.0, 3.0], [2.0], [0.5, 0.1, 0.2]]
    retro = [[0.1, -0.6], [0.7], [0.0, 0.2, -0.3]]
    # group 0 has 3 turns: ceil(0.5·3) = 2 highest (3.0, 2.0); group 1: ceil(0.5·3) = 2 (0.5, 0.2)
    top = select_counterfactual_turns(groups, surprisal, retro, "surprisal_top_q", 0.5, 0.0)
    assert top == [[False, True], [True], [True, False, True]]
    assert select_counterfactual_turns(groups, surprisal, retro, "surprisal_top_q", 0.0, 0.0) == \
        [[False, False], [False], [False, False, False]]
    thr = select_counterfactual_turns(groups, surprisal, retro, "credit_threshold", 0.2, 0.25)
    assert thr == [[False, True], [True], [False, False, True]]
    with pytest.raises(ValueError, match="cf_selector"):
        select_counterfactual_turns(groups, surprisal, retro, "random", 0.2, 0.5)


def test_turn_spans_and_config_errors():
    assert turn_spans(MASK[0]) == [(0, 2), (3, 4), (6, 8)]
    assert turn_spans(torch.tensor([False, False])) == []
    with pytest.raises(ValueError, match="hindsight_gamma"):
        build("advantage", "tcpo", hindsight_gamma=1.5)
    with pytest.raises(ValueError, match="norm"):
        build("advantage", "tcpo", norm="batch")
    # tied credits (std 0) give 0, not NaN, even with eps = 0
    assert build("advantage", "tcpo", eps=0.0)(_inputs([0.0, 0.0, 0.0])).advantages.abs().sum().item() == 0.0
