"""Every registered policy loss follows the plug-in conventions (docs/design.md §4)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlvr.losses import PolicyLoss
from rlvr.registry import build, get, names
from rlvr.types import LossInputs, LossOutput

LOSSES = ["cispo", "dppo_kl", "dppo_tv", "gspo", "ppo_clip"]


def test_all_losses_registered():
    assert set(LOSSES) <= set(names("loss"))


@pytest.mark.parametrize("name", LOSSES)
def test_conventions(name):
    cls = get("loss", name)
    assert issubclass(cls, PolicyLoss)
    assert "(arXiv:" in cls.paper
    doc = cls.__doc__ or ""
    assert "Differs from" in doc and "Shapes" in doc and "Equation" in doc
    assert cls.Config.__dataclass_params__.frozen
    for f in dataclasses.fields(cls.Config):
        assert f.metadata.get("help"), f"{name}.{f.name} has no help text"


@pytest.mark.parametrize("name", LOSSES)
def test_output_shape_and_detached_metrics(name):
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 4, generator=g) - 0.1
    logp = (old + 0.05 * torch.randn(3, 4, generator=g)).requires_grad_(True)
    inputs = LossInputs(logprobs=logp, old_logprobs=old, advantages=torch.randn(3, 4, generator=g),
                        mask=torch.ones(3, 4, dtype=torch.bool))
    out = build("loss", name)(inputs)
    assert isinstance(out, LossOutput) and out.per_token.shape == (3, 4)
    assert out.per_token.requires_grad
    assert {"clipfrac", "approx_kl"} <= set(out.metrics)
    assert all(v.dim() == 0 and not v.requires_grad for v in out.metrics.values())
