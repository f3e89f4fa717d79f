"""What a comparison is: a base setup, methods (presets + overrides), seeds and one equal budget.

```yaml
out_dir: runs/compare/baselines
base: {task: {name: arithmetic}, run: {eval_every: 50}}   # any `rlvr train` config tree
methods:
  grpo: {preset: grpo}
  dapo: {preset: dapo, overrides: ["algorithm.loss.eps_high=0.3"]}
  grpo_rl: {preset: grpo, role: negative_control, rl_seed_offset: 1000}  # another RL seed, same warm start
seeds: [0, 1, 2, 3, 4]        # default: 0-9 (DEFAULT_SEEDS)
baseline: grpo                # every other method is paired against it seed by seed (default: the first)
budget: {steps: 300}          # or {rollouts: 19200} or {seconds: 120}
shared_warm_start: true       # one warm start per seed, the same starting model for every method
warm_cache: runs/compare/warm # optional: warm starts kept here, keyed by what they depend on, and reused
                              # by every comparison file whose model, task and warm start agree
```

Held-out evaluation: ``base.run.eval_problems`` (after ``base_config``) defaults to
``DEFAULT_EVAL_PROBLEMS`` = 1,000 problems per run in a comparison (``rlvr train``'s own default stays 200):
at 100 problems one problem is a whole point of accuracy, so evaluation noise swamps the effects a
comparison looks for. Files that set the count keep it.

A method may also pre-register its ``claim`` (metric, direction, margin, subset, mechanism; see
``rlvr.compare.claims``), which ``rlvr findings`` judges from the committed results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlvr.compare.claims import Claim, check_roles, parse_claim, parse_rl_seed_offset, parse_role
from rlvr.presets import resolve_config
from rlvr.train.config import Config, ConfigError, load_config, merge, parse_override, read_yaml

BUDGET_KINDS = ("steps", "rollouts", "seconds")
METHOD_KEYS = {"preset", "overrides", "role", "claim", "rl_seed_offset"}
DEFAULT_SEEDS = list(range(10))  # 5 seeds cannot reject (sign-flip floor 2/32) and detect only ~4-9 points
DEFAULT_EVAL_PROBLEMS = 1000  # held-out problems per run when the file does not say
_UNLIMITED_STEPS = 10**9


@dataclass(frozen=True)
class Method:
    name: str
    preset: str | None = None  # a preset name or YAML path
    overrides: tuple[str, ...] = ()  # key.sub=value, applied after the preset
    role: str = "method"  # method | baseline | negative_control | positive_control (rlvr.compare.claims)
    claim: Claim | None = None  # the pre-registered claim its row is judged on
    rl_seed_offset: int | None = None  # run.rl_seed = seed + offset (None: the RL seed is the warm-start seed)


@dataclass(frozen=True)
class CompareConfig:
    out_dir: Path
    base: dict
    methods: tuple[Method, ...]
    seeds: tuple[int, ...]
    budget: dict  # exactly one of BUDGET_KINDS → value
    shared_warm_start: bool = True
    jobs: int = 1
    baseline: str | None = None  # the method paired against (None: the first)
    warm_cache: Path | None = None  # warm starts shared across comparison files (None: out_dir/warm)
    source: dict = field(default_factory=dict)  # the file as read, for the record

    def budget_text(self) -> str:
        kind, value = next(iter(self.budget.items()))
        unit = {"steps": "optimizer steps", "rollouts": "sampled completions", "seconds": "seconds of RL wall-clock"}
        return f"{value:g} {unit[kind]} per run, equal for every run"

    def run_tree(self, method: Method, seed: int) -> dict:
        """The full config tree of one run: base ← preset ← overrides ← seed, folder and budget."""
        tree = dict(self.base)
        preset = resolve_config(method.preset) if method.preset else None
        if preset:
            tree = merge(tree, read_yaml(Path(preset)))
        for item in method.overrides:
            tree = merge(tree, parse_override(item))
        kind, value = next(iter(self.budget.items()))
        run = {"seed": seed, "out_dir": str(self.out_dir / "runs" / method.name / f"seed{seed}")}
        if method.rl_seed_offset is not None:  # same warm start and held-out problems, another RL seed
            run["rl_seed"] = seed + method.rl_seed_offset
        if kind == "steps":
            run["steps"] = int(value)
        else:
            run.update({"steps": _UNLIMITED_STEPS, "max_rollouts" if kind == "rollouts" else "max_seconds": value})
        return merge(tree, {"run": run})

    def run_config(self, method: Method, seed: int) -> Config:
        return load_config(None, base=self.run_tree(method, seed))


def load_compare(path: str | Path, out_dir: str | None = None, build: bool = True) -> CompareConfig:
    """Read and check a comparison file; every run's config is validated before anything runs
    (``build=False``: only the file's own schema, claims and roles, e.g. for ``rlvr findings``)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"comparison file not found: {path}")
    data = yaml.safe_load(path.read_text()) or {}
    known = {"out_dir", "base", "base_config", "methods", "seeds", "budget", "shared_warm_start", "jobs", "paper",
             "baseline", "regime", "claim", "warm_cache"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown}; valid: {sorted(known)}")
    base = data.get("base") or {}
    if data.get("base_config"):
        base = merge(read_yaml((path.parent / data["base_config"]).resolve()), base)
    if (base.get("run") or {}).get("eval_problems") is None:
        base = merge(base, {"run": {"eval_problems": DEFAULT_EVAL_PROBLEMS}})
    cfg = CompareConfig(out_dir=Path(out_dir or data.get("out_dir") or f"runs/compare/{path.stem}"),
                        base=base, methods=_methods(data.get("methods"), path),
                        seeds=_seeds(data.get("seeds", DEFAULT_SEEDS), path),
                        budget=_budget(data.get("budget"), path),
                        shared_warm_start=bool(data.get("shared_warm_start", True)),
                        jobs=int(data.get("jobs", 1)), baseline=_baseline(data.get("baseline"), path),
                        warm_cache=Path(data["warm_cache"]) if data.get("warm_cache") else None, source=data)
    if cfg.baseline is not None and cfg.baseline not in {m.name for m in cfg.methods}:
        raise ConfigError(f"{path}: baseline '{cfg.baseline}' is not one of the methods "
                          f"{[m.name for m in cfg.methods]}")
    check_roles([(m.name, m.role, m.claim) for m in cfg.methods], cfg.baseline or cfg.methods[0].name, str(path))
    if not build:
        return cfg
    from rlvr.train.build import build_pipeline
    for method in cfg.methods:  # fail fast: unknown keys, plug-in names or parameters name the method
        try:
            run = cfg.run_config(method, cfg.seeds[0])
            _check_model_path(run.model.path, path, method.name)
            build_pipeline(run)
        except (ConfigError, FileNotFoundError) as err:
            raise ConfigError(f"{path}: method '{method.name}': {err}") from err
    return cfg


def _check_model_path(model_path: str | None, path: Path, method: str) -> None:
    """A comparison on a real model (``model.path``, no warm start: the transfer families) stops before any run
    when the checkpoint is not on this machine, instead of every run failing alone as it loads it."""
    if model_path and not Path(model_path).exists():
        raise ConfigError(f"{path}: method '{method}': model.path {model_path} does not exist (rlvr loads local "
                          "checkpoints only; a relative path is read from the folder rlvr compare runs in; "
                          f"SmolLM2-135M-Instruct: rlvr model get smollm2-135m-instruct {model_path})")


def _methods(raw: Any, path: Path) -> tuple[Method, ...]:
    if not raw or not isinstance(raw, dict):
        raise ConfigError(f"{path}: 'methods' must map method names to {{preset, overrides}}")
    out = []
    for name, spec in raw.items():
        spec = spec or {}
        extra = sorted(set(spec) - METHOD_KEYS)
        if extra:
            raise ConfigError(f"{path}: method '{name}': unknown key(s) {extra}; valid: {sorted(METHOD_KEYS)}")
        overrides = spec.get("overrides") or []
        if isinstance(overrides, dict):  # a mapping of dotted keys is accepted too
            overrides = [f"{k}={yaml.safe_dump(v, default_flow_style=True).strip()}" for k, v in overrides.items()]
        out.append(Method(str(name), spec.get("preset"), tuple(str(o) for o in overrides),
                          role=parse_role(str(name), spec, str(path)),
                          claim=parse_claim(str(name), spec.get("claim"), str(path)),
                          rl_seed_offset=parse_rl_seed_offset(str(name), spec, str(path))))
    return tuple(out)


def _seeds(raw: Any, path: Path) -> tuple[int, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(s, int) for s in raw):
        raise ConfigError(f"{path}: 'seeds' must be a non-empty list of integers, got {raw!r}")
    return tuple(raw)


def _baseline(raw: Any, path: Path) -> str | None:
    if raw is not None and not isinstance(raw, str):
        raise ConfigError(f"{path}: 'baseline' must be a method name, got {raw!r}")
    return raw


def _budget(raw: Any, path: Path) -> dict:
    if not isinstance(raw, dict) or len(raw) != 1 or next(iter(raw)) not in BUDGET_KINDS:
        raise ConfigError(f"{path}: 'budget' must be exactly one of {list(BUDGET_KINDS)} with a value, got {raw!r}")
    kind, value = next(iter(raw.items()))
    if not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{path}: budget {kind} must be a positive number, got {value!r}")
    return {kind: value}
