"""Every preset under bf16 mixed precision with gradient checkpointing: gradient presets train with
float32 master weights; presets whose optimizer runs its own loop refuse the knobs in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from rlvr.train.config import ConfigError
from rlvr.train.logging import read_metrics
from rlvr.train.precision import check_supported
from rlvr.train.trainer import Trainer
from tests.e2e.resume import weights
from tests.helpers.tiny import tiny_config

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "methods"
KNOBS = ["run.mixed_precision=bf16", "model.gradient_checkpointing=true", "run.steps=1", "critic.warmup_steps=0"]


def _optimizer(preset: str) -> str:
    return ((yaml.safe_load((PRESETS / f"{preset}.yaml").read_text()) or {}).get("optim") or {}).get("name", "gradient")


@pytest.mark.parametrize("preset", sorted(p.stem for p in PRESETS.glob("*.yaml")))
def test_every_preset_takes_mixed_precision_or_refuses_it(tmp_path, preset):
    path = str(PRESETS / f"{preset}.yaml")
    cfg = tiny_config(tmp_path, KNOBS, path=path)
    if _optimizer(preset) != "gradient":
        with pytest.raises(ConfigError, match="trains with its own loop") as err:
            check_supported(cfg)
        assert "\n" not in str(err.value)
        return
    trainer = Trainer(cfg)
    before = weights(trainer.policy)
    trainer.train()
    rows = read_metrics(tmp_path)
    assert len(rows) == 1 and torch.isfinite(torch.tensor(rows[0]["loss/total"]))
    assert all(p.dtype == torch.float32 for p in trainer.policy.parameters())  # master weights stay fp32
    after = weights(trainer.policy)
    if rows[0]["adv/abs_mean"] > 0:
        assert any(not torch.equal(before[k], after[k]) for k in before)
