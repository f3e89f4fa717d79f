"""The update's exact savings on padded passes (optim.skip_zero_rows, optim.trim_padding,
optim.length_buckets; optim.packing=never, since packed passes have no padding to trim:
tests/e2e/test_packing.py): the weights after one update equal those with every row computed at full
padding, and presets that need every row keep them."""

from __future__ import annotations

import pytest
import torch

from rlvr.train.trainer import Trainer
from rlvr.types import AdvantageInputs
from tests.helpers.batches import savings_global_batch
from tests.helpers.tiny import tiny_config
from tests.helpers.tolerance import assert_same_loss, assert_same_update

OFF = ["optim.skip_zero_rows=false", "optim.trim_padding=false"]
PADDED = ["optim.packing=never"]  # the padded passes whose savings this file tests


def _update(tmp_path, name: str, overrides: list[str]) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """(weights before, metrics, weights after) of one update on the fixed batch (16 rows, 8 of them
    in unanimous groups, left-padded prompts, completions of 2..8 tokens)."""
    trainer = Trainer(tiny_config(tmp_path / name, ["optim.micro_batch_size=3", *overrides]))
    batch = savings_global_batch(trainer.policy.config.vocab_size)
    batch.advantages = trainer.parts.advantage(AdvantageInputs(
        rewards=batch.rewards, mask=batch.completion_mask, group_ids=batch.group_ids)).advantages
    before = torch.cat([p.detach().flatten().clone() for p in trainer.policy.parameters()])
    metrics = trainer.update(batch)
    return before, metrics, torch.cat([p.detach().flatten() for p in trainer.policy.parameters()])


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_each_saving_leaves_the_update_unchanged(tmp_path, mode):
    agg = [f"algorithm.aggregation.mode={mode}"]
    before, ref, want = _update(tmp_path, "off", [*agg, *OFF, *PADDED])
    assert (want - before).abs().max() > 1e-4  # the update moved the weights
    assert ref["update/skipped_row_frac"] == 0.0 and ref["update/padding_frac"] > 0.2
    for name, knobs in {"skip": [OFF[1]], "trim": [OFF[0]], "both": []}.items():
        _, got, weights = _update(tmp_path, name, [*agg, *knobs, *PADDED])
        assert_same_update(weights, want, before)  # float32 reordering only (tests/helpers/tolerance.py)
        assert_same_loss(got["loss/total"], ref["loss/total"])  # skipped rows add 0
        if name != "trim":
            assert got["update/skipped_row_frac"] == 0.5, name  # groups 2 and 3 are unanimous
        if name != "skip":
            assert got["update/tokens"] < ref["update/tokens"] and got["update/padding_frac"] < 0.2, name


def test_several_epochs_reuse_the_first_epochs_old_logprobs_on_the_rows_computed(tmp_path):
    """ppo_epochs=2 with one mini-batch: behaviour log-probs come from the first epoch's forward, which
    never sees the rows left out; they are never trained, so the second epoch is unchanged too."""
    knobs = ["optim.ppo_epochs=2"]
    before, ref, want = _update(tmp_path, "off", [*knobs, *OFF, *PADDED])
    _, got, weights = _update(tmp_path, "on", knobs)
    assert got["update/skipped_row_frac"] == 0.5 and ref["loss/behaviour_kl"] > 0
    assert_same_update(weights, want, before)
    assert_same_loss(got["loss/total"], ref["loss/total"])


@pytest.mark.parametrize("preset,overrides", [("grpo", ["algorithm.kl_coef=0.01"]),
                                              ("grpo", ["algorithm.entropy_coef=0.01"]), ("bpco", [])],
                         ids=["kl", "entropy_bonus", "critic"])
def test_a_method_that_needs_every_row_turns_the_skip_off(tmp_path, preset, overrides):
    trainer = Trainer(tiny_config(tmp_path, overrides, path=f"configs/methods/{preset}.yaml"))
    assert trainer.cfg.optim.skip_zero_rows and trainer.updater.needs_every_row()
    plain = Trainer(tiny_config(tmp_path / "plain", [], path="configs/methods/grpo.yaml"))
    assert not plain.updater.needs_every_row()  # ppo_clip with no KL, no entropy bonus, no critic


def test_an_entropy_bonus_computes_every_row(tmp_path):
    _, metrics, _ = _update(tmp_path, "bonus", ["algorithm.entropy_coef=0.01"])
    assert metrics["update/skipped_row_frac"] == 0.0 and metrics["update/padding_frac"] < 0.2


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_length_buckets_leave_the_update_unchanged(tmp_path, mode):
    """One micro-batch (micro_batch_size 0) of 16 rows: optim.length_buckets splits it, longest rows
    first, into 16 // 8 = 2 forwards, each trimmed to its own longest row."""
    knobs = [f"algorithm.aggregation.mode={mode}", "optim.micro_batch_size=0", "optim.skip_zero_rows=false",
             *PADDED]
    before, ref, want = _update(tmp_path, "off", [*knobs, "optim.trim_padding=false", "optim.length_buckets=1"])
    _, one, _ = _update(tmp_path, "one", [*knobs, "optim.length_buckets=1"])
    _, got, weights = _update(tmp_path, "buckets", [*knobs, "optim.length_buckets=3"])
    assert_same_update(weights, want, before)
    assert_same_loss(got["loss/total"], ref["loss/total"])
    assert got["update/tokens"] <= one["update/tokens"] <= ref["update/tokens"]
    assert got["update/skipped_row_frac"] == 0.0
    # the buckets really ran: two forwards of 8 rows, longest rows first (tests/unit/test_batching_plan.py)
