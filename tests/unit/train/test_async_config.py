"""rollout.async_rollout: defaults, ranges and the off-policy correction rule (rlvr.train.async_check)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.train.async_check import correction_of
from rlvr.train.config import ConfigError, load_config

PRESETS = Path(__file__).resolve().parents[3] / "configs" / "methods"


def _cfg(*overrides: str):
    return load_config(None, ["task.name=arithmetic", *overrides])


def test_default_is_the_synchronous_loop():
    a = _cfg().rollout.async_rollout
    assert a.max_staleness == 0 and a.weight_sync_steps == 1 and not a.enabled


def test_lagging_rows_need_a_correction():
    with pytest.raises(ConfigError, match="ppo_clip_is"):  # plain PPO-clip against recomputed log-probs
        _cfg("rollout.async_rollout.max_staleness=1")
    with pytest.raises(ConfigError, match="on-policy"):
        _cfg("rollout.async_rollout.max_staleness=1", "algorithm.loss.name=ppo_clip_is",
             "algorithm.loss.is_mode=none")


@pytest.mark.parametrize("overrides", [["algorithm.loss.name=ppo_clip_is"],
                                       ["optim.old_logprobs=rollout"],
                                       ["optim.old_logprobs=rollout", "algorithm.loss.name=gspo"]])
def test_corrected_runs_are_accepted(overrides):
    cfg = _cfg("rollout.async_rollout.max_staleness=2", *overrides)
    assert cfg.rollout.async_rollout.enabled and "log-probs" in correction_of(cfg)


def test_in_worker_at_k0_needs_no_correction():
    cfg = _cfg("rollout.async_rollout.in_worker=true")
    assert cfg.rollout.async_rollout.enabled and correction_of(cfg) == "none (on-policy)"


@pytest.mark.parametrize("override, words", [
    ("rollout.sampler.name=hint", "plain sampler"),
    ("rollout.engine=vllm", "rollout.engine"),
    ("critic.enabled=true", "critic"),
])
def test_what_the_worker_cannot_run_is_refused(override, words):
    with pytest.raises(ConfigError, match=words):
        _cfg("rollout.async_rollout.max_staleness=1", "algorithm.loss.name=ppo_clip_is", override)


@pytest.mark.parametrize("override", ["rollout.async_rollout.max_staleness=-1",
                                      "rollout.async_rollout.weight_sync_steps=0",
                                      "rollout.async_rollout.timeout_s=0",
                                      "rollout.async_rollout.stale=1"])
def test_bad_values_are_one_line_errors(override):
    with pytest.raises(ConfigError, match="async_rollout"):
        _cfg(override)


def test_presets_on_recomputed_ppo_clip_are_refused_under_async():
    """GRPO's preset (ppo_clip, recomputed log-probs) assumes on-policy rows: refused at k = 1; the
    same preset with the truncated-IS loss is accepted."""
    with pytest.raises(ConfigError, match="treats them as on-policy"):
        load_config(PRESETS / "grpo.yaml", ["rollout.async_rollout.max_staleness=1"])
    cfg = load_config(PRESETS / "grpo.yaml", ["rollout.async_rollout.max_staleness=1",
                                              "algorithm.loss.name=ppo_clip_is"])
    assert cfg.rollout.async_rollout.max_staleness == 1


def test_data_parallelism_is_refused_with_one_line():
    from rlvr.train.async_collect import AsyncCollector
    cfg = _cfg("rollout.async_rollout.max_staleness=1", "algorithm.loss.name=ppo_clip_is")
    with pytest.raises(ConfigError, match="data parallelism is not supported"):
        AsyncCollector(task=None, selector=None, shapers=[], filters=[], rollout_cfg=cfg.rollout, tokenizer=None,
                       seed=0, rank=0, world_size=2, timer=None)
