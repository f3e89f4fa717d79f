"""Plug-in registries: one per kind, ``@register(kind, name)``, ``build(kind, name, **params)``.

A plug-in is a class with a ``Config`` attribute: a frozen dataclass whose fields carry a one-line
help text (``param(default, "help")``). ``build`` checks the parameters against the fields, so a
typo is an error naming the key and the valid ones. A name of the form ``"pkg.module:Object"``
imports a user plug-in, so nobody forks the library to try an idea.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

KINDS = (
    "selector", "sampler", "engine", "verifier", "shaper", "filter", "advantage",
    "weighting", "loss", "loop", "optimizer", "task", "teacher", "environment", "tracker",
    "eval_strategy",
)

# Modules whose import registers the built-in plug-ins of each kind (named, not imported: the
# plug-ins sit in higher layers than the registry, ``rlvr.layers``).
_BUILTIN_MODULES = {
    "advantage": ("rlvr.advantages",),
    "loss": ("rlvr.losses",),
    "filter": ("rlvr.filters",),
    "verifier": ("rlvr.rewards",),
    "shaper": ("rlvr.rewards",),
    "task": ("rlvr.tasks", "rlvr.envs"),  # the environments register their environment-backed tasks
    "selector": ("rlvr.selection",),
    "sampler": ("rlvr.rollout",),
    "engine": ("rlvr.rollout.engines",),
    "weighting": ("rlvr.weighting",),
    "loop": ("rlvr.loops",),
    "optimizer": ("rlvr.optim",),
    "teacher": ("rlvr.rewards.teacher",),
    "environment": ("rlvr.envs",),
    "tracker": ("rlvr.train.trackers",),
    "eval_strategy": ("rlvr.eval.strategies",),
}


class RegistryError(KeyError):
    """Unknown kind, unknown plug-in name, unknown parameter or duplicate registration."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    cls: type
    summary: str  # first docstring line
    paper: str  # "Title (arXiv:xxxx.xxxxx)" or "" for infrastructure


_REGISTRY: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
T = TypeVar("T")


def param(default: Any, help: str, **kwargs: Any) -> Any:
    """A dataclass field with a help line (shown by ``rlvr list`` and checked by the tests)."""
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kwargs)
    return dataclasses.field(default=default, metadata={"help": help}, **kwargs)


def register(kind: str, name: str) -> Callable[[T], T]:
    """Class decorator: put a plug-in into the registry of ``kind`` under ``name``."""
    _check_kind(kind)

    def deco(cls: T) -> T:
        if name in _REGISTRY[kind]:
            raise RegistryError(f"{kind} '{name}' is already registered (by {_REGISTRY[kind][name].cls.__qualname__})")
        config = getattr(cls, "Config", None)
        if config is None or not dataclasses.is_dataclass(config):
            raise RegistryError(f"{kind} '{name}': the class needs a dataclass attribute 'Config'")
        doc = inspect.getdoc(cls) or ""
        _REGISTRY[kind][name] = Entry(kind, name, cls, doc.split("\n", 1)[0], getattr(cls, "paper", ""))
        cls.registered_name = name  # type: ignore[attr-defined]
        return cls

    return deco


def names(kind: str) -> list[str]:
    """The registered names of one kind, sorted."""
    return sorted(_entries(kind))


def entries(kind: str | None = None) -> list[Entry]:
    kinds = KINDS if kind is None else (kind,)
    return [e for k in kinds for _, e in sorted(_entries(k).items())]


def get(kind: str, name: str) -> type:
    """The plug-in class registered as ``name`` (or imported from ``"pkg.module:Object"``)."""
    if ":" in name:
        return _import_object(name)
    table = _entries(kind)
    if name not in table:
        raise RegistryError(f"unknown {kind} '{name}'; valid names: {', '.join(sorted(table)) or '(none)'}")
    return table[name].cls


def build(kind: str, name: str, **params: Any) -> Any:
    """Instantiate a plug-in with hyperparameters ``params`` (unknown keys are errors)."""
    cls = get(kind, name)
    config_cls = getattr(cls, "Config", None)
    if config_cls is None:  # a plain user callable or class without hyperparameters
        if params:
            raise RegistryError(f"{kind} '{name}' takes no parameters, got {sorted(params)}")
        return cls() if inspect.isclass(cls) else cls
    return cls(make_config(config_cls, params, where=f"{kind} '{name}'"))


def make_config(config_cls: type, params: dict[str, Any], where: str) -> Any:
    """``config_cls(**params)`` with a clear error for keys the dataclass does not have, and for a
    non-boolean value of a ``bool`` field (the string ``"no"`` would otherwise read as true)."""
    valid = [f.name for f in dataclasses.fields(config_cls)]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise RegistryError(f"{where}: unknown parameter(s) {unknown}; valid: {valid}")
    for f in dataclasses.fields(config_cls):
        if f.type in (bool, "bool") and f.name in params and not isinstance(params[f.name], bool):
            raise RegistryError(f"{where}: parameter '{f.name}' is true or false, got {params[f.name]!r}")
    return config_cls(**params)


def describe(entry: Entry) -> dict[str, Any]:
    """A JSON-ready description of one plug-in: summary, paper and hyperparameters."""
    fields = []
    for f in dataclasses.fields(entry.cls.Config):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
        fields.append({"name": f.name, "default": default, "help": f.metadata.get("help", "")})
    return {"kind": entry.kind, "name": entry.name, "summary": entry.summary,
            "paper": entry.paper, "params": fields}


def _check_kind(kind: str) -> None:
    if kind not in _REGISTRY:
        raise RegistryError(f"unknown plug-in kind '{kind}'; valid kinds: {', '.join(KINDS)}")


def _entries(kind: str) -> dict[str, Entry]:
    _check_kind(kind)
    for module in _BUILTIN_MODULES.get(kind, ()):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:  # a kind whose built-ins are not written yet
            if err.name != module:
                raise
    return _REGISTRY[kind]


def import_object(path: str, what: str = "plug-in") -> Any:
    """The object a ``"pkg.module:Object"`` path names (for config entries that are not plug-in kinds)."""
    module_name, sep, attr = path.partition(":")
    if not (module_name and sep and attr):
        raise RegistryError(f"{what} '{path}': expected 'pkg.module:Object'")
    return _import_object(path)


def _import_object(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise RegistryError(f"cannot import plug-in module '{module_name}' (from '{path}'): {err}") from err
    try:
        return getattr(module, attr)
    except AttributeError:
        raise RegistryError(f"module '{module_name}' has no attribute '{attr}' (from '{path}')") from None
