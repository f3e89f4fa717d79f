"""optim.packing and the token budgets: values checked when the config is built, one-line errors."""

from __future__ import annotations

import re

import pytest

from rlvr.train.config import ConfigError, OptimConfig, load_config


def test_packing_takes_auto_always_never():
    assert OptimConfig().packing == "auto"
    assert OptimConfig(packing="always").packing == "always"
    with pytest.raises(ValueError, match=re.escape("optim.packing must be auto | always | never, got 'yes'")):
        OptimConfig(packing="yes")


def test_a_negative_budget_is_refused():
    with pytest.raises(ValueError, match="max_tokens_per_micro_batch.*>= 0"):
        OptimConfig(max_tokens_per_micro_batch=-1)
    with pytest.raises(ValueError, match="max_tokens_per_scoring_pass.*>= 0"):
        OptimConfig(max_tokens_per_scoring_pass=-5)


def test_yaml_off_read_as_a_boolean_is_named():
    with pytest.raises(ConfigError, match="optim.packing: expected a string, got the boolean False"):
        load_config(None, ["optim.packing=off"])
