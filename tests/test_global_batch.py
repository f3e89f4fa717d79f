"""rlvr.train.global_batch in one process (the 2-process behaviour is tests/e2e/test_distributed_global.py)."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from rlvr.train.global_batch import apply_row_weights, gather_feedback, sum_over_ranks
from rlvr.types import Problem, Rollouts


def _batch() -> Rollouts:
    mask = torch.tensor([[True, True, False], [True, False, False], [True, True, True]])
    return Rollouts(problems=[Problem("a", uid="a")] * 2 + [Problem("b", uid="b")], prompt_ids=torch.ones(3, 2).long(),
                    prompt_mask=torch.ones(3, 2, dtype=torch.bool), completion_ids=torch.ones(3, 3).long(),
                    completion_mask=mask, group_ids=torch.tensor([0, 0, 1]), rewards=torch.tensor([[1.0], [0.0], [1.0]]),
                    advantages=torch.tensor([[1.0, 1.0, 0.0], [-2.0, 0.0, 0.0], [0.5, 0.5, 0.5]]),
                    meta={"supervision_groups": [{"uid": "a"}, {"uid": "b"}]})


def test_one_process_returns_its_own_batch():
    acc, batch = Accelerator(cpu=True), _batch()
    stats = {"x": torch.tensor([1.0, 2.0])}
    assert sum_over_ranks(acc, stats) is stats
    fb = gather_feedback(acc, batch, ("supervision_groups",))
    assert fb["problems"] is batch.problems and fb["rewards"] is batch.rewards and fb["offset"] == 0
    assert fb["meta"]["supervision_groups"] == [{"uid": "a"}, {"uid": "b"}]


def test_row_weights_scale_this_ranks_share():
    # Global weights (5,) for rows of two ranks; this rank holds global rows 2..4 (offset 2):
    # its advantages are multiplied by 0.5, 2, 1 row by row. min 0.5, max 2, std of (1, 1, 0.5, 2, 1).
    batch = _batch()
    weights = torch.tensor([1.0, 1.0, 0.5, 2.0, 1.0])
    out = apply_row_weights(batch, weights, offset=2)
    torch.testing.assert_close(batch.advantages, torch.tensor([[0.5, 0.5, 0.0], [-4.0, 0.0, 0.0], [0.5, 0.5, 0.5]]))
    assert out["select/loss_weight_min"] == 0.5 and out["select/loss_weight_max"] == 2.0
    assert out["select/loss_weight_std"] == pytest.approx(float(weights.std()))
    assert apply_row_weights(batch, None, 0) == {}
