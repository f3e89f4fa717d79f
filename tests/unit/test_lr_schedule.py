"""One learning-rate schedule (``rlvr.lr_schedule``) for the RL policy's optimizer (``build_optimizer``)
and the supervised warm start (``rlvr.sft.warm_start``): both apply the same factors, read off the
rate each optimizer step actually used."""

from __future__ import annotations

import math

import pytest
import torch

import rlvr.sft
from rlvr.lr_schedule import lr_factor, lr_schedule
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.registry import build
from rlvr.train.build import build_optimizer
from tests.helpers.tiny import tiny_config

# Warm-up 2 of 6 optimizer steps: (s+1)/2 for s < 2; then frac = (s-2)/4 over the 4 remaining steps.
GOLDEN = {
    "constant": [0.5, 1.0, 1.0, 1.0, 1.0, 1.0],
    "linear": [0.5, 1.0, 1.0, 0.75, 0.5, 0.25],
    "cosine": [0.5, 1.0, 1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.5 * (1 + math.cos(3 * math.pi / 4))],
}


# rel=1e-15: a rate is base_lr x factor, one float multiply (error <= 2^-53 relative).


def rates_per_step(optimizer: torch.optim.Optimizer) -> list[float]:
    """Records the rate of every ``optimizer.step()`` (read just before it runs)."""
    seen: list[float] = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append(opt.param_groups[0]["lr"]))
    return seen


@pytest.mark.parametrize("schedule", sorted(GOLDEN))
def test_factors_golden(schedule):
    assert [lr_factor(schedule, 2, 6)(s) for s in range(6)] == pytest.approx(GOLDEN[schedule], rel=1e-15)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sched, seen = lr_schedule(opt, schedule, 2, 6), rates_per_step(opt)
    for _ in range(6):
        opt.step()
        sched.step()
    assert seen == pytest.approx([0.5 * f for f in GOLDEN[schedule]], rel=1e-15)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_policy_optimizer_follows_the_schedule(tmp_path, schedule):
    # 3 RL steps x ppo_epochs 2 = 6 optimizer steps, 2 of them warm-up
    cfg = tiny_config(tmp_path, [f"optim.schedule={schedule}", "optim.warmup_steps=2", "optim.ppo_epochs=2",
                                 "optim.lr=0.01"])
    opt, sched = build_optimizer(cfg, torch.nn.Linear(2, 1))
    seen = rates_per_step(opt)
    for _ in range(6):
        opt.step()
        sched.step()
    assert seen == pytest.approx([0.01 * f for f in GOLDEN[schedule]], rel=1e-15)


def test_warm_start_follows_the_schedule(monkeypatch):
    recorded: list[list[float]] = []

    def recording_schedule(optimizer, schedule, warmup, steps):
        recorded.append(rates_per_step(optimizer))
        return lr_schedule(optimizer, schedule, warmup, steps)

    monkeypatch.setattr(rlvr.sft, "lr_schedule", recording_schedule)
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=16, layers=1, heads=2, seed=0)
    rlvr.sft.warm_start(model, tok, build("task", "arithmetic"), steps=6, batch_size=2, lr=0.02, warmup=2,
                        schedule="linear", progress=False)
    assert len(recorded) == 1 and recorded[0] == pytest.approx([0.02 * f for f in GOLDEN["linear"]], rel=1e-15)
