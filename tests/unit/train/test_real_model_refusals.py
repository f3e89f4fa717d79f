"""Presets that cannot run as written on a pretrained model (``model.path``) stop at validation with one
clear ConfigError naming the plug-in, what it needs and what was given (issue 46: every method on SmolLM2);
the setting that makes them run is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.train.build import build_pipeline
from rlvr.train.config import ConfigError, load_config
from tests.helpers.tiny import TINY

PRESETS = Path(__file__).resolve().parents[3] / "configs" / "methods"


def _config(preset: str, overrides: list[str]):
    return load_config(str(PRESETS / f"{preset}.yaml"), overrides, base=TINY)


def test_a_warm_start_weak_model_is_refused_on_a_pretrained_model(tmp_path):
    cfg = _config("outer_prefix", [f"model.path={tmp_path}"])
    with pytest.raises(ConfigError) as err:
        build_pipeline(cfg)
    text = str(err.value)
    assert "rollout.sampler 'prefix'" in text and "Outer prefixes from a weaker model" in text  # the method
    assert "weak_model 'warm_start:0.25'" in text and "supervised warm start" in text  # what it needs
    assert f"model.path={tmp_path}" in text  # what was given
    assert "'reference'" in text and "\n" not in text  # what to set instead, on one line


def test_the_testbed_or_a_reference_weak_model_is_accepted(tmp_path):
    testbed = build_pipeline(_config("outer_prefix", [])).sampler  # no model.path: the warm start is there
    assert "warm start" in testbed.testbed_only
    real = build_pipeline(_config("outer_prefix", ["rollout.sampler.weak_model=reference", f"model.path={tmp_path}"]))
    assert real.sampler.testbed_only == ""


def test_cliff_on_a_task_without_a_step_checker_names_the_task():
    pytest.importorskip("reasoning_gym")
    cfg = _config("cliff", ["task.name=reasoning_gym", "task.params.dataset=chain_sum", "task.params.size=50"])
    with pytest.raises(ConfigError) as err:
        build_pipeline(cfg)
    text = str(err.value)
    assert "algorithm.advantage 'cliff'" in text and "algorithm.teacher" in text  # the method, what it needs
    assert "task 'reasoning_gym' has no per-step checker" in text and "teacher 'llm'" in text  # given, instead


def test_the_chess_task_is_refused_on_a_pretrained_model(tmp_path):
    from rlvr.train.build import build_task
    with pytest.raises(ConfigError) as err:
        build_task(_config("chess_rl", [f"model.path={tmp_path}"]))
    text = str(err.value)
    assert f"task 'chess_puzzles' cannot run on model.path={tmp_path}" in text  # the method's task, what was given
    assert "warm start" in text and "'>'" in text and "\n" not in text  # what it needs, on one line
    pytest.importorskip("chess")
    assert build_task(_config("chess_rl", [])).testbed_only  # the testbed model takes it
