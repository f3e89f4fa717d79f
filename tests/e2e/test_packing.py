"""Packed, padding-free passes (optim.packing; with sdpa, row-wise sdpa) and token-budget
micro-batches: the weights after an update equal the padded computation with every row at full
padding, for each aggregation mode and the default settings, with mini-batches (old log-probs from a
packed scoring pass), with LoRA and on 2 data-parallel ranks.

Tolerance (tests/helpers/tolerance.py, assert_same_update): packing changes only the order of float32
sums (matmul tiles over one long sequence instead of several padded rows, each softmax over a row's
keys inside a wider masked row, other micro-batch boundaries in the gradient accumulation), so the
updates agree within the reordering bound UPDATE_RTOL; a real difference (a leak across rows, a
position off by one, a row lost) moves the update by tens of percent.
"""

from __future__ import annotations

import pytest

from rlvr.models.rowwise_attention import ROWWISE_SDPA
from rlvr.train.config import ConfigError
from rlvr.train.trainer import Trainer
from tests.e2e.test_distributed import _max_diff, _run
from tests.e2e.test_exact_savings import _update
from tests.helpers.tiny import tiny_config
from tests.helpers.tolerance import assert_same_loss, assert_same_update

PADDED = ["optim.packing=never", "optim.skip_zero_rows=false", "optim.trim_padding=false"]
PACKED = ["optim.packing=always"]
# the fixed batch's rows take 4..13 tokens packed: a budget of 24 gives several micro-batches of 2-5 rows
BUDGET = ["optim.max_tokens_per_micro_batch=24", "optim.max_tokens_per_scoring_pass=40"]


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_a_packed_update_equals_the_padded_one(tmp_path, mode):
    agg = [f"algorithm.aggregation.mode={mode}"]
    before, ref, want = _update(tmp_path, "padded", [*agg, *PADDED])
    cases = {"auto": [], "packed": PACKED, "budget": [*PACKED, *BUDGET],
             "padded_budget": [*BUDGET, "optim.packing=never"],
             "checkpointed": [*BUDGET, "model.gradient_checkpointing=true"]}  # auto: row-wise sdpa
    for name, knobs in cases.items():
        _, got, weights = _update(tmp_path, name, [*agg, *knobs])
        assert_same_update(weights, want, before)
        assert_same_loss(got["loss/total"], ref["loss/total"])
        assert got["update/tokens"] < ref["update/tokens"], name
        if name != "padded_budget":
            assert got["update/padding_frac"] == 0.0, name  # every computed position a real token


def test_packed_mini_batches_and_scoring_pass_equal_the_padded_ones(tmp_path):
    """Two optimizer steps per batch: the behaviour log-probs come from a packed no-grad scoring pass
    (under its own token budget) before the first step, then each mini-batch trains packed."""
    knobs = ["optim.mini_batches=2", "optim.lr=1e-2", "algorithm.aggregation.mode=seq-mean-token-sum-norm"]
    before, ref, want = _update(tmp_path, "padded", [*knobs, *PADDED])
    _, got, weights = _update(tmp_path, "packed", [*knobs, *PACKED, *BUDGET])
    assert got["update/padding_frac"] == 0.0 and ref["update/padding_frac"] > 0.2
    assert ref["loss/behaviour_kl"] > 0  # the second mini-batch's policy has moved
    assert_same_update(weights, want, before)
    assert_same_loss(got["loss/total"], ref["loss/total"])


def test_a_packed_lora_update_equals_the_padded_one(tmp_path):
    pytest.importorskip("peft")
    lora = ["model.lora.r=4", "model.lora.alpha=8", "optim.lr=1e-2"]
    before, ref, want = _update(tmp_path, "padded", [*lora, *PADDED])
    _, got, weights = _update(tmp_path, "packed", [*lora, *PACKED, *BUDGET])
    assert got["update/padding_frac"] == 0.0
    assert_same_update(weights, want, before)
    assert_same_loss(got["loss/total"], ref["loss/total"])


def test_auto_packs_sdpa_row_wise_never_keeps_it_and_on_names_the_fallback(tmp_path):
    """auto packs where attention runs row by row: the tiny models' sdpa runs as row-wise sdpa
    (rlvr.models.rowwise_attention), every computed position a real token; never keeps transformers'
    sdpa and padded (trimmed) passes. always with an attention implementation that cannot take packed
    rows fails naming the fallback."""
    _, auto, _ = _update(tmp_path, "auto", [])
    assert auto["update/padding_frac"] == 0.0
    assert Trainer(tiny_config(tmp_path / "a", [])).policy.config._attn_implementation == ROWWISE_SDPA
    _, never, _ = _update(tmp_path, "never", ["optim.packing=never"])
    assert never["update/padding_frac"] > 0.0  # trimmed, not packed
    assert Trainer(tiny_config(tmp_path / "n", ["optim.packing=never"])).policy.config._attn_implementation == "sdpa"
    trainer = Trainer(tiny_config(tmp_path / "on", PACKED))
    trainer.policy.config._attn_implementation = "flex_attention"
    from tests.helpers.batches import savings_global_batch
    batch = savings_global_batch(trainer.policy.config.vocab_size)
    batch.advantages = batch.rewards.expand_as(batch.completion_mask) - 0.5
    with pytest.raises(ConfigError, match="flex_attention.*optim.packing=auto falls back to padded"):
        trainer.update(batch)


def test_two_process_packed_update_equals_single_process_padded(tmp_path):
    """2 gloo ranks, zero-advantage rows skipped and the rest packed under a token budget (rank 1 holds
    only unanimous groups: one zero-gradient row a mini-batch), against one process fully padded."""
    two = _run(["savings"], tmp_path / "two", 2, overrides=[*PACKED, *BUDGET])
    off = _run(["savings_off"], tmp_path / "off", 1, overrides=["optim.packing=never"])[0]
    assert (two[0]["padding"], two[1]["padding"]) == (0.0, 0.0) and off["padding"] > 0.2  # packed, padded
    assert_same_loss(two[0]["loss"], off["loss"])
    assert abs(off["loss"]) > 1e-3
    assert _max_diff(two[0]["flat"], two[1]["flat"]) == 0.0
    assert_same_update(two[0]["flat"], off["flat"], off["init"])
