"""Typed run configuration: YAML files and ``key.sub=value`` overrides mapped onto dataclasses.

This module is the YAML loader: files (with ``include``) and overrides merged and mapped onto the
schema's dataclasses (``rlvr.train.config_schema``; ``load_config``, ``from_dict``: unknown keys are
errors naming the key and the valid ones), and back (``to_dict``, ``write_config``: the one writer of
``RUN/config.yaml``; ``replace``: a copy with some fields changed). It gives the schema's names too, so
``from rlvr.train.config import Config, load_config`` reads as one place.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from rlvr.files import write_text_atomic
from rlvr.models.lora_spec import LoraSpec
from rlvr.train.config_schema import (
    AlgorithmConfig, AsyncConfig, Config, ConfigError, CriticConfig, ModelConfig, OptimConfig, PluginSpec,
    RolloutConfig, RunConfig, SandboxConfig, TaskConfig, WarmStartConfig,
)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                base: dict | None = None) -> Config:
    """Defaults ← ``base`` ← YAML file (and the files it ``include``s) ← ``key.sub=value`` overrides."""
    tree: dict = {}
    if base:
        tree = merge(tree, base)
    if path is not None:
        tree = merge(tree, read_yaml(Path(path)))
    for item in overrides or []:
        tree = merge(tree, parse_override(item))
    return from_dict(Config, tree)


def read_yaml(path: Path, _including: tuple[Path, ...] = ()) -> dict:
    """A YAML mapping (``safe_load``); an ``include: other.yaml`` key merges that file underneath.
    Syntax errors, rejected tags and include loops are ``ConfigError``s naming the file and line."""
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    text = path.read_text()
    data = _safe_load(text, str(path)) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    data.pop("paper", None)  # presets cite their paper; it is documentation, not a knob
    included = data.pop("include", None)
    if included:
        target = (path.parent / str(included)).resolve()
        if target in (*_including, path.resolve()):
            line = next((n for n, row in enumerate(text.splitlines(), 1) if row.startswith("include:")), 1)
            chain = " -> ".join(str(p) for p in (*_including, path.resolve(), target))
            raise ConfigError(f"{path}, line {line}: include loop ({chain})")
        data = merge(read_yaml(target, (*_including, path.resolve())), data)
    return data


def _safe_load(text: str, source: str, lines: bool = True) -> Any:
    """``yaml.safe_load`` whose errors (syntax, a tag it refuses to construct) are one line with the line."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None and lines else ""
        what = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{source}{where}: invalid YAML ({what})") from None


def parse_override(item: str) -> dict:
    """``"a.b.c=1e-4"`` → ``{"a": {"b": {"c": 1e-4}}}`` (the value parsed as YAML)."""
    if "=" not in item:
        raise ConfigError(f"override '{item}' must look like key.sub=value")
    key, _, raw = item.partition("=")
    value = _safe_load(raw, f"override '{item}'", lines=False) if raw else ""
    tree: Any = value
    for part in reversed(key.strip().split(".")):
        tree = {part: tree}
    return tree


def merge(a: dict, b: dict) -> dict:
    """Recursive dict merge, ``b`` wins; plug-in ``params`` merge key by key too, and options given to a
    plug-in named by a bare string (``engine: specroll`` then ``engine.num_heads=2``) keep its name."""
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        elif isinstance(value, dict) and isinstance(out.get(key), str) and "name" not in value:
            out[key] = {"name": out[key], **value}
        else:
            out[key] = value
    return out


def from_dict(cls: type, data: Any, where: str = "") -> Any:
    """Build dataclass ``cls`` from a nested mapping, rejecting unknown keys."""
    if dataclasses.is_dataclass(data):
        return data
    if cls is PluginSpec:
        return _plugin_spec(data, where)
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"unknown key(s) {[_join(where, k) for k in unknown]}; valid keys at "
                          f"'{where or '<top>'}': {sorted(fields)}")
    kwargs = {}
    hints = typing.get_type_hints(cls)
    for name, value in data.items():
        if hints[name] is PluginSpec and isinstance(value, dict) and "name" not in value:
            # Overriding only parameters (algorithm.loss.eps_high=0.28) keeps the default plug-in.
            default = _default(fields[name])
            value = {"name": default.name, **merge(default.params, value.get("params", {})),
                     **{k: v for k, v in value.items() if k != "params"}}
        kwargs[name] = _convert(hints[name], value, _join(where, name))
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where or 'config'}: {err}") from err


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


def _convert(hint: Any, value: Any, where: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, where)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
        origin = typing.get_origin(hint)
        if dataclasses.is_dataclass(hint):  # an optional section: {} means "off", like None
            return from_dict(hint, value, where) if value != {} else None
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if hint is tuple and isinstance(value, list):
        return tuple(value)
    if hint is list and isinstance(value, list):
        return [_plugin_spec(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is list and isinstance(value, list):  # list[float], list[dict]: plain items, each checked
        item = typing.get_args(hint)[0]
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if hint is str and isinstance(value, bool):  # YAML reads on/off/yes/no as booleans
        raise ConfigError(f"{where}: expected a string, got the boolean {value!r} (YAML reads on/off/yes/no "
                          f"as booleans: quote the word)")
    if hint in (int, str, bool, dict) and (not isinstance(value, hint) or (hint is int and isinstance(value, bool))):
        raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}")
    return value


def _plugin_spec(data: Any, where: str) -> PluginSpec:
    """``"grpo"`` or ``{name: grpo, eps: 1e-4}`` or ``{name: grpo, params: {...}}`` → PluginSpec."""
    if isinstance(data, PluginSpec):
        return data
    if isinstance(data, str):
        return PluginSpec(data, {})
    if not isinstance(data, dict) or "name" not in data:
        raise ConfigError(f"{where}: a plug-in is a name or a mapping with 'name', got {data!r}")
    params = dict(data.get("params") or {})
    flat = {k: v for k, v in data.items() if k not in ("name", "params")}
    clash = sorted(k for k in set(params) & set(flat) if params[k] != flat[k])
    if clash:  # e.g. a preset's `sampler: {weak_model: A}` and an override `sampler.params.weak_model=B`
        raise ConfigError(f"{where}: {[_join(where, k) for k in clash]} set twice, as "
                          f"{[flat[k] for k in clash]} and as params.{clash[0]}={params[clash[0]]!r}; a "
                          f"plug-in's parameters sit next to its name (set {_join(where, clash[0])}=...), "
                          f"so drop the 'params.' form")
    return PluginSpec(str(data["name"]), {**params, **flat})


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def to_dict(cfg: Any) -> Any:
    """A plain, YAML-safe tree of a config (tuples become lists)."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    return cfg


CONFIG_FILE = "config.yaml"  # RUN/config.yaml: the config a run (or a saved adapter) was made with


def config_text(cfg: Any) -> str:
    """The YAML of ``cfg`` as ``RUN/config.yaml`` holds it (``load_config`` reads it back)."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def write_config(folder: str | Path, cfg: Any) -> Path:
    """Write ``FOLDER/config.yaml`` (the folder made if missing), atomically: the one writer of it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(folder / CONFIG_FILE, config_text(cfg))


def replace(cfg: Config, **sections: dict) -> Config:
    """A copy of ``cfg`` with some fields of some sections changed: ``replace(cfg, run={"steps": 3})``."""
    return from_dict(Config, merge(to_dict(cfg), sections))


__all__ = [
    "CONFIG_FILE", "AlgorithmConfig", "AsyncConfig", "Config", "ConfigError", "CriticConfig", "LoraSpec",
    "ModelConfig", "OptimConfig", "PluginSpec", "RolloutConfig", "RunConfig", "SandboxConfig", "TaskConfig",
    "WarmStartConfig",
    "config_text", "from_dict", "load_config", "merge", "parse_override", "read_yaml", "replace", "to_dict",
    "write_config",
]
