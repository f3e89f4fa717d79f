"""Mini-batch updates (optim.mini_batches): M = 1 is the old trainer bit for bit, later mini-batches
see a moved policy (ratio ≠ 1), the schedule counts optimizer steps, bypass mode reads the rollout's
log-probs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr.batching import mini_batches
from rlvr.train.config import ConfigError
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from rlvr.types import BatchError
from tests.e2e.tiny import tiny_config

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "methods"

# Weights after 2 steps, pinned on the trainer before mini-batches existed (commit d275f44):
# (sum, sum |w|, sum w²) of every parameter in float64. Locally they matched bit for bit (every
# tensor torch.equal); the tolerance only absorbs another machine's float rounding.
PINNED = {
    "plain": ([], (93.7640430118081, 409.82801519629356, 103.8622801795269)),
    "epochs": (["optim.ppo_epochs=2", "optim.micro_batch_size=5", "algorithm.kl_coef=0.05", "optim.schedule=cosine",
                "optim.warmup_steps=1"], (94.00936680769519, 412.0269977050775, 104.06846835142645)),
}


@pytest.mark.parametrize("case", sorted(PINNED))
def test_one_mini_batch_equals_the_pinned_trainer(tmp_path, case):
    overrides, expected = PINNED[case]
    trainer = Trainer(tiny_config(tmp_path, ["run.steps=2", "optim.mini_batches=1", *overrides]))
    trainer.train()
    flat = torch.cat([p.detach().double().flatten() for p in trainer.policy.parameters()])
    got = (flat.sum().item(), flat.abs().sum().item(), (flat ** 2).sum().item())
    for g, e in zip(got, expected, strict=True):
        assert abs(g - e) < 1e-6, (got, expected)


def _record_loss_inputs(trainer: Trainer) -> list:
    """Wrap the objective so every call's LossInputs is kept (to read the ratio it saw)."""
    seen, objective = [], trainer.parts["objective"]

    def spy(inputs, **kwargs):
        seen.append(inputs)
        return objective(inputs, **kwargs)

    trainer.parts["objective"] = spy
    return seen


def _max_log_ratio(inputs) -> float:
    return (inputs.logprobs.detach() - inputs.old_logprobs)[inputs.mask].abs().max().item()


def test_later_mini_batches_see_a_moved_policy(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, ["run.steps=1", "optim.mini_batches=4", "optim.lr=1e-2"]))
    seen = _record_loss_inputs(trainer)
    trainer.train()
    assert len(seen) == 4 and all(s.mask.shape[0] == 4 for s in seen)  # 16 rows / 4
    assert _max_log_ratio(seen[0]) < 1e-5  # the behaviour policy is the policy before the first step
    assert all(_max_log_ratio(s) > 1e-3 for s in seen[1:])  # ratio ≠ 1 after a step
    row = read_metrics(tmp_path)[-1]
    assert row["loss/behaviour_kl"] > 0 and row["loss/approx_kl"] != 0  # mean over the 4 mini-batches
    assert "loss/clipfrac" in row and "timing/old_logprobs" in row


def test_schedule_counts_optimizer_steps(tmp_path):
    # 2 RL steps × 2 epochs × 2 mini-batches = 8 optimizer steps; linear decay reaches 0 at the last.
    trainer = Trainer(tiny_config(tmp_path, ["run.steps=2", "optim.ppo_epochs=2", "optim.mini_batches=2",
                                             "optim.schedule=linear"]))
    trainer.train()
    assert trainer.scheduler.last_epoch == 8 and trainer.scheduler.get_last_lr()[0] == 0.0


def test_bypass_mode_uses_the_rollout_logprobs(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, ["run.steps=1", "optim.old_logprobs=rollout", "optim.mini_batches=2"]))
    seen = _record_loss_inputs(trainer)
    batches = []
    collect = trainer.collector.collect
    trainer.collector.collect = lambda *a, **k: batches.append(collect(*a, **k)) or batches[-1]
    trainer.train()
    batch = batches[0][0]
    rows = mini_batches(batch.num_rows, 2)
    for inputs, idx in zip(seen, rows, strict=True):
        assert torch.equal(inputs.old_logprobs, batch.rollout_logprobs[idx].float())
    assert _max_log_ratio(seen[0]) < 1e-4  # the sampler's numerics match the trainer's on CPU


def test_mini_batches_interleave_rows():
    assert [r.tolist() for r in mini_batches(6, 3)] == [[0, 3], [1, 4], [2, 5]]
    assert [r.tolist() for r in mini_batches(4, 1)] == [[0, 1, 2, 3]]
    with pytest.raises(BatchError, match="optim.mini_batches=4 needs at least 4 rows per rank"):
        mini_batches(3, 4)


def test_bad_mini_batch_settings_are_named(tmp_path):
    with pytest.raises(ConfigError, match="optim.mini_batches and optim.ppo_epochs must be >= 1"):
        tiny_config(tmp_path, ["optim.mini_batches=0"])
    with pytest.raises(ConfigError, match="optim.old_logprobs must be recompute | rollout"):
        tiny_config(tmp_path, ["optim.old_logprobs=vllm"])


def test_bpco_preset_moves_the_policy_within_a_batch(tmp_path):
    # Critic warm-up takes steps 1-2; step 3 trains the policy in 4 mini-batches from the rollout's
    # log-probs (bypass), so the ratio the DPPO trust region watches leaves 1.
    preset = PRESETS / "bpco.yaml"
    Trainer(tiny_config(tmp_path, ["run.steps=3"], path=str(preset))).train()
    row = read_metrics(tmp_path)[-1]
    assert row["loss/behaviour_kl"] > 0 and row["loss/approx_kl"] != 0
