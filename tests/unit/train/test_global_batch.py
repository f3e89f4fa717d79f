"""rlvr.train.global_batch in one process (the 2-process behaviour is tests/e2e/test_distributed_global.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator

from rlvr import AdvantageInputs
from rlvr.train.collect import Collector
from rlvr.train.global_batch import (apply_row_weights, gather_feedback, local_inputs, fully_masked, rows_over_ranks,
                                     sum_over_ranks, trains_no_rows)
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


def _fallback(global_rows: int, parts: list[Rollouts], stats: dict) -> list[Rollouts]:
    collector = SimpleNamespace(rows_over_ranks=lambda n: global_rows)  # the ranks' summed row count
    return Collector._fallback(collector, parts, _batch(), {"shaper_metrics": {"filter/kept": 0.0}}, stats)


def test_all_filtered_fallback_is_decided_on_the_global_batch():
    stats: dict = {}
    (out,) = _fallback(0, [], stats)  # no rank kept a row: the unfiltered first round, as in one process
    assert out.num_rows == 3 and out.completion_mask.sum() == 6 and stats["rollout/all_filtered"] == 1.0
    (out,) = _fallback(8, [], stats)  # other ranks kept rows: this rank trains none
    assert stats["rollout/all_filtered"] == 0.0 and trains_no_rows(out)
    assert out.num_rows == 3 and not out.completion_mask.any() and out.meta["shaper_metrics"] == {"filter/kept": 0.0}
    kept = [_batch().select(torch.tensor([2]))]
    assert _fallback(8, kept, stats) == kept and not trains_no_rows(kept[0])
    assert rows_over_ranks(Accelerator(cpu=True), 5) == 5


def test_a_fully_masked_rank_shows_no_rows_to_estimators_and_selectors():
    # (gather_feedback's no-row share needs two processes: tests/e2e/test_distributed_global.py)
    batch = fully_masked(_batch(), {"supervision_groups": [{"uid": "a"}]})
    inputs = AdvantageInputs(rewards=batch.rewards, mask=batch.completion_mask, group_ids=batch.group_ids)
    empty = local_inputs(batch, inputs)
    assert empty.rewards.shape == (0, 1) and empty.mask.shape == (0, 3) and empty.group_ids.shape == (0,)
    assert local_inputs(_batch(), inputs) is inputs
    assert apply_row_weights(batch, torch.tensor([0.5, 1.5]), offset=2) == {  # global stats, no rows scaled
        "select/loss_weight_min": 0.5, "select/loss_weight_max": 1.5,
        "select/loss_weight_std": pytest.approx(0.7071, abs=1e-4)}
