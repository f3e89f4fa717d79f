"""DAPO's soft overlong punishment: golden values, the [-factor, 0] bound, its own objective, the cap default."""

from __future__ import annotations

import pytest
import torch

from rlvr import BatchError, Problem, Rollouts, build
from rlvr.rewards.overlong import overlong_penalty
from rlvr.train.build import build_pipeline


def batch(lengths, verdicts, groups) -> Rollouts:
    n, width = len(lengths), max(lengths)
    mask = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]  # (N, T) row i has lengths[i] tokens
    return Rollouts(problems=[Problem(prompt=f"p{g}") for g in groups], prompt_ids=torch.zeros(n, 1, dtype=torch.long),
                    prompt_mask=torch.ones(n, 1, dtype=torch.bool), completion_ids=torch.ones(n, width, dtype=torch.long),
                    completion_mask=mask, group_ids=torch.tensor(groups),
                    rewards=torch.tensor(verdicts, dtype=torch.float32)[:, None], reward_names=["correct"],
                    texts=["x"] * n)


def test_penalty_golden_values_methods_1_3():
    # docs/methods.md §1.3: L_max = 8192, buffer 4096, factor 1: expected = 4096; L = 6144 → −(2048/4096) = −0.5;
    # L ≤ 4096 → 0; L = 8192 → −1; L = 10000 (past the cap) → bounded at −1, not −1.44.
    got = overlong_penalty(torch.tensor([4000, 4096, 6144, 8192, 10000]), 8192, 4096, 1.0)
    assert got.tolist() == [0.0, 0.0, -0.5, -1.0, -1.0]
    # factor 0.5: the bound is −0.5; 7168 → −(3072/4096)·0.5 = −0.375
    assert overlong_penalty(torch.tensor([7168, 9000]), 8192, 4096, 0.5).tolist() == [-0.375, -0.5]


def test_shaped_term_is_its_own_objective_and_verdict_is_kept():
    # max_length 10, buffer 4: expected 6. Lengths 4, 8, 10, 12 → penalties 0, −0.5, −1, −1 (bounded).
    out = build("shaper", "overlong", max_length=10, buffer=4, penalty=1.0)(batch([4, 8, 10, 12], [1, 1, 0, 1], [0] * 4))
    assert out.reward_names == ["overlong_shaped", "overlong", "correct"]
    assert out.rewards[:, 0].tolist() == [1.0, 0.5, -1.0, 0.0]
    assert out.rewards[:, 1].tolist() == [0.0, -0.5, -1.0, -1.0]
    assert out.rewards[:, 2].tolist() == [1.0, 1.0, 0.0, 1.0]
    assert out.meta["shaper_metrics"]["reward/overlong_frac"] == 0.75


def test_dynamic_sampling_filters_on_correctness_not_the_shaped_reward():
    # Group 0: all correct but of different lengths → the shaped reward varies (std > 0) though
    # correctness does not: DAPO drops it. Group 1: mixed correctness → kept.
    rows = batch([4, 8, 4, 4], [1, 1, 1, 0], [0, 0, 1, 1])
    shaped = build("shaper", "overlong", max_length=10, buffer=4)(rows)
    on_shaped = build("filter", "zero_std")(shaped)
    on_correct = build("filter", "zero_std", reward="correct")(shaped)
    assert on_shaped.group_ids.tolist() == [0, 0, 1, 1]
    assert on_correct.group_ids.tolist() == [1, 1]


def test_max_length_defaults_to_the_completion_cap(tmp_path):
    from tests.helpers.tiny import tiny_config
    cfg = tiny_config(tmp_path, ["rollout.max_new_tokens=256", "algorithm.shapers=[{name: overlong}]"])
    shaper = build_pipeline(cfg).shapers[0]
    assert shaper.config.max_length == 256
    # The case: with max_new_tokens = 256 a correct 200-token answer was scored 1 − 20 = −19
    # by the old fixed max_length = 48; tied to the cap it keeps its reward of 1.
    assert shaper(batch([200], [1.0], [0])).rewards[0, 0].item() == 1.0
    explicit = tiny_config(tmp_path, ["algorithm.shapers=[{name: overlong, max_length: 20, buffer: 4}]"])
    assert build_pipeline(explicit).shapers[0].config.max_length == 20


def test_unset_max_length_outside_the_trainer_is_a_clear_error():
    with pytest.raises(BatchError, match="max_length is unset"):
        build("shaper", "overlong")(batch([3], [1.0], [0]))
    with pytest.raises(ValueError, match="buffer <= max_length"):
        build("shaper", "overlong", max_length=4, buffer=8)
