"""SpecRoll inside the gradient trainer: selected by ``rollout.engine``, its statistics reach
metrics.jsonl, and its heads persist across steps (one engine per policy)."""

from __future__ import annotations

import pytest

from rlvr.rollout.engines.specroll import engine_for
from rlvr.train.config import ConfigError
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from tests.helpers.tiny import tiny_config


def test_trainer_logs_specroll_metrics_and_keeps_heads(tmp_path):
    params = {"num_heads": 2, "fit_steps": 5, "reflex_eta": 0.5, "reflex_eps": 2.0}
    cfg = tiny_config(str(tmp_path), ["rollout.engine=specroll", "run.steps=2",
                                      "rollout.engine_params.num_heads=2", "rollout.engine_params.fit_steps=5",
                                      "rollout.engine_params.reflex_eta=0.5", "rollout.engine_params.reflex_eps=2.0"])
    assert cfg.rollout.engine.params == params and cfg.rollout.engine_params == {}  # the old spelling, folded
    trainer = Trainer(cfg)
    trainer.train()
    rows = read_metrics(tmp_path)
    assert len(rows) == 2
    for row in rows:
        assert 0.0 <= row["rollout/spec_accept_rate"] <= 1.0
        assert row["rollout/spec_tokens_per_forward"] >= 1.0
    assert rows[0]["rollout/spec_head_updates"] == 1.0  # the bootstrap fit after the first window
    engine = engine_for(trainer.policy, params)
    assert engine.fits >= 1 and engine.heads is not None  # the same engine served both steps


def test_unknown_engine_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown engine 'fast'"):
        tiny_config(str(tmp_path), ["rollout.engine=fast"])
    with pytest.raises(ConfigError, match="num_head"):
        tiny_config(str(tmp_path), ["rollout.engine=specroll", "rollout.engine_params.num_head=2"])
