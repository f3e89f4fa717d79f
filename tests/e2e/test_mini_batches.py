"""Mini-batch updates (optim.mini_batches): M = 1 is the plain update written out by hand, later mini-batches
see a moved policy (ratio ≠ 1), the schedule counts optimizer steps, bypass mode reads the rollout's
log-probs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr.batching import mini_batches
from rlvr.rollout import sequence_logprobs
from rlvr.train.config import ConfigError
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from rlvr.types import AdvantageInputs, BatchError
from tests.helpers.batches import fixed_global_batch
from tests.helpers.tiny import tiny_config
from tests.helpers.tolerance import assert_same_update

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "methods"

def _fixed_update(tmp_path, overrides: list[str]) -> tuple[Trainer, object, torch.Tensor, torch.Tensor]:
    """(trainer, batch, weights before, weights after) of one update on the fixed 16-row batch (no
    sampling, so nothing depends on which tokens a machine's rounding happens to sample)."""
    trainer = Trainer(tiny_config(tmp_path, ["optim.mini_batches=1", *overrides]))
    batch = fixed_global_batch(trainer.policy.config.vocab_size)
    batch.advantages = trainer.parts.advantage(AdvantageInputs(
        rewards=batch.rewards, mask=batch.completion_mask, group_ids=batch.group_ids)).advantages
    before = torch.cat([p.detach().flatten().clone() for p in trainer.policy.parameters()])
    trainer.update(batch)
    return trainer, batch, before, torch.cat([p.detach().flatten() for p in trainer.policy.parameters()])


def _plain_step(model: torch.nn.Module, batch, cfg) -> torch.Tensor:
    """The M = 1 update written out by hand: PPO-clip at ratio 1 (old = current log-probs, so nothing
    clips), per_token = −A·exp(logp − sg(logp)), seq-mean-token-mean, the global gradient clip, AdamW."""
    logp = sequence_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.attention,
                             temperature=cfg.rollout.temperature)[0]  # (N, T)
    mask = batch.completion_mask.float()  # (N, T)
    per_token = -batch.advantages * torch.exp(logp - logp.detach()) * mask
    loss = (per_token.sum(-1) / mask.sum(-1).clamp(min=1)).sum() / (mask.sum(-1) > 0).sum()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, betas=cfg.optim.betas,
                                  weight_decay=cfg.optim.weight_decay)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
    optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_one_mini_batch_is_the_plain_update_written_out(tmp_path):
    trainer, batch, before, after = _fixed_update(tmp_path / "rlvr", ["optim.micro_batch_size=3"])
    fresh = Trainer(tiny_config(tmp_path / "ref", ["optim.mini_batches=1"]))  # the same initial weights
    start = torch.cat([p.detach().flatten().clone() for p in fresh.policy.parameters()])
    assert torch.equal(start, before) and trainer.cfg.algorithm.aggregation.mode == "seq-mean-token-mean"
    assert_same_update(after, _plain_step(fresh.policy, batch, fresh.cfg), before)


def test_micro_batches_and_epochs_leave_one_mini_batch_unchanged(tmp_path):
    """Two epochs and a warm-up/cosine schedule: micro-batches of 5 rows against the whole
    batch in one forward give the same update (the split only reorders float32 sums)."""
    knobs = ["optim.ppo_epochs=2", "optim.schedule=cosine", "optim.warmup_steps=1", "optim.lr=1e-2"]
    _, _, before, whole = _fixed_update(tmp_path / "whole", [*knobs, "optim.micro_batch_size=0"])
    _, _, _, split = _fixed_update(tmp_path / "split", [*knobs, "optim.micro_batch_size=5"])
    assert_same_update(split, whole, before)


def _record_loss_inputs(trainer: Trainer) -> list:
    """Wrap the objective so every call's LossInputs is kept (to read the ratio it saw)."""
    seen, objective = [], trainer.updater.objective

    def spy(inputs, **kwargs):
        seen.append(inputs)
        return objective(inputs, **kwargs)

    trainer.updater.objective = spy  # the Updater holds the objective it was built with
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
    assert "loss/clipfrac" in row and "timing/loss" in row


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
