"""Helpers for the exact-resume tests: a copy of a model's weights, and a run killed mid-training then
resumed from its last checkpoint."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of every tensor in the model's state dict."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def crash_then_resume(monkeypatch: pytest.MonkeyPatch, make: Callable[[], Any], crash_at: int = 3) -> Any:
    """Build a trainer with ``make()`` and train it with its class's ``train_step`` raising
    KeyboardInterrupt on call ``crash_at`` (which must happen); then restore ``train_step``, build a
    fresh trainer with ``make()`` on the same run folder and ``train(resume=True)`` it. Returns that
    resumed trainer."""
    crashed = make()
    cls = type(crashed)
    original = cls.train_step
    calls = {"n": 0}

    def crash_at_call(self):
        calls["n"] += 1
        if calls["n"] == crash_at:
            raise KeyboardInterrupt(f"simulated kill during step {crash_at}")
        return original(self)

    monkeypatch.setattr(cls, "train_step", crash_at_call)
    with pytest.raises(KeyboardInterrupt):
        crashed.train()
    monkeypatch.setattr(cls, "train_step", original)
    resumed = make()
    resumed.train(resume=True)
    return resumed
