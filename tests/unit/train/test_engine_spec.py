"""``rollout.engine`` is a plug-in spec like ``rollout.sampler`` (``{name: specroll, num_heads: 2}``); the
old spelling, a bare name beside ``rollout.engine_params``, still loads to the same config, with a
deprecation notice."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from rlvr.rollout.samplers.base import engine_kwargs
from rlvr.train.config import Config, ConfigError, PluginSpec, from_dict, load_config, to_dict

OPTIONS = {"num_heads": 2, "reflex": False}


def write(tmp_path, name: str, rollout: dict) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"rollout": rollout}))
    return str(path)


def test_old_spelling_loads_to_the_same_config_with_a_notice(tmp_path, capsys):
    new = load_config(write(tmp_path, "new", {"engine": {"name": "specroll", **OPTIONS}}))
    assert capsys.readouterr().err == ""
    old = load_config(write(tmp_path, "old", {"engine": "specroll", "engine_params": OPTIONS}))
    err = capsys.readouterr().err
    assert "rollout.engine_params is deprecated" in err and "engine: {name: specroll, num_heads: 2" in err
    assert new.rollout.engine == old.rollout.engine == PluginSpec("specroll", OPTIONS)
    assert to_dict(new) == to_dict(old) and old.rollout.engine_params == {}


def test_overrides_address_the_spec(capsys):
    cfg = load_config(None, ["rollout.engine=specroll", "rollout.engine.num_heads=2", "rollout.engine.reflex=false"])
    assert cfg.rollout.engine == PluginSpec("specroll", OPTIONS)
    assert load_config(None, ["rollout.engine={name: hf}"]).rollout.engine == PluginSpec("hf", {})
    assert capsys.readouterr().err == ""  # the new spelling gives no notice
    with pytest.raises(ConfigError, match=r"rollout.engine \(loop\): unknown parameter\(s\) \['num_heads'\]"):
        load_config(None, ["rollout.engine.num_heads=2"])  # options alone keep the default engine, loop


def test_an_option_set_both_ways_with_two_values_is_an_error(tmp_path):
    path = write(tmp_path, "both", {"engine": {"name": "specroll", **OPTIONS}})
    assert load_config(path, ["rollout.engine_params.num_heads=2"]).rollout.engine.params == OPTIONS  # agrees
    with pytest.raises(ConfigError, match=r"rollout.engine_params.num_heads=3 and rollout.engine.num_heads=2"):
        load_config(path, ["rollout.engine_params.num_heads=3"])


def test_a_saved_config_reloads_unchanged_and_silently(tmp_path, capsys):
    cfg = load_config(write(tmp_path, "old", {"engine": "specroll", "engine_params": OPTIONS}))
    capsys.readouterr()
    again = from_dict(Config, yaml.safe_load(yaml.safe_dump(to_dict(cfg))))
    assert again == cfg and capsys.readouterr().err == ""


def test_generation_receives_the_name_and_options():
    cfg = load_config(None, ["rollout.engine={name: specroll, num_heads: 2, reflex: false}"])
    kwargs = engine_kwargs(cfg.rollout)
    assert kwargs["engine"] == "specroll" and kwargs["engine_params"] == OPTIONS
    bare = engine_kwargs(SimpleNamespace(engine="hf", engine_params={}))  # a duck-typed rollout with a name
    assert bare["engine"] == "hf" and bare["engine_params"] == {}


def test_the_specroll_preset_uses_the_spec():
    cfg = load_config("configs/methods/specroll.yaml")
    assert cfg.rollout.engine.name == "specroll" and cfg.rollout.engine.params["num_heads"] == 3
