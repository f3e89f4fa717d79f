"""Pre-registered claims and run roles of a comparison file, read before anything runs.

Each method of a comparison file may carry the claim it is judged on and a role:

```yaml
methods:
  grpo: {preset: grpo}                      # the baseline (role: baseline, implied)
  grpo_rl1: {preset: grpo, role: negative_control, rl_seed_offset: 1000}   # same warm start, new RL seed
  grpo_harmed: {preset: grpo, role: positive_control, overrides: ["optim.lr=0.00025"]}
  dr_grpo:
    preset: dr_grpo
    claim:
      section: "§1.2"                       # where docs/methods.md describes it
      title: Dr. GRPO
      paper: Dropping 1/length and 1/std removes their biases at equal accuracy
      metric: accuracy_after                # the per-run metric that decides the row (results.json names)
      direction: matches                    # better | not_worse | matches
      margin: null                          # not_worse / matches: default 0.25 x the baseline's gain
      versus: baseline                      # baseline (paired per seed) | warm_start (the run's own gain)
      subset: null                          # e.g. hard: the claim is about that subset of the problems
      mechanism: {metric: final_response_length, vs_baseline: lower}   # what must fire for the row to count
      not_testable: null                    # a reason, when the regime cannot exercise the claim at all
      paper_effect: null                    # the paper's effect in the metric's units (0.039 = +3.9 points)
      paper_baseline: null                  # the paper's comparison when it is not the family's baseline
      min_updates: null                     # optimizer updates the method must make (default 25 % of the baseline's)
```

A mechanism fires when, over the method's seeds, the mean of ``metric`` is ``above`` (or ``below``) a
value, or its paired difference from the baseline is ``vs_baseline: lower | higher`` with a 95 %
Student-t interval that excludes 0. ``metric`` is a per-run results.json metric or, with ``window``,
one of ``run_metrics.json`` (per-seed training metrics over that window of steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlvr.train.config import ConfigError

DIRECTIONS = ("better", "not_worse", "matches")
ROLES = ("method", "baseline", "negative_control", "positive_control")
VERSUS = ("baseline", "warm_start")
DEFAULT_MARGIN_FRACTION = 0.25  # of the baseline's gain, for not_worse / matches claims
DEFAULT_MIN_UPDATES_FRACTION = 0.25  # of the baseline's fewest optimizer updates, where min_updates is unset
CLAIM_KEYS = {"section", "title", "paper", "metric", "direction", "margin", "versus", "subset", "mechanism",
              "not_testable", "note", "paper_effect", "paper_baseline", "min_updates"}
MECHANISM_KEYS = {"metric", "window", "above", "below", "vs_baseline", "what"}


@dataclass(frozen=True)
class Mechanism:
    """What must be seen in the method's runs for its claim to have been exercised."""

    metric: str  # a results.json per-run metric, or a run_metrics.json one when window is set
    window: str | None = None  # run_metrics.json window ("all steps", "last 32", ...)
    above: float | None = None  # fires when the method's mean over seeds is above this
    below: float | None = None  # ... or below this
    vs_baseline: str | None = None  # lower | higher: the paired difference's 95 % interval excludes 0 that way
    what: str = ""  # one line: what the metric is evidence of


@dataclass(frozen=True)
class Claim:
    """One pre-registered claim: the metric that decides it, its direction and what gates it."""

    method: str
    section: str  # "§2.3"
    title: str  # "Cliff"
    paper: str  # the paper's headline claim, one line
    metric: str  # results.json metric name (accuracy_after, pass@4, final_reward, heldout/capture, ...)
    direction: str = "better"  # better | not_worse | matches
    margin: float | None = None  # not_worse / matches (None: DEFAULT_MARGIN_FRACTION x the baseline's gain)
    versus: str = "baseline"  # baseline | warm_start
    subset: str | None = None  # the problems the claim is about (a results.json subset name)
    mechanism: Mechanism | None = None
    not_testable: str | None = None  # the reason the regime cannot exercise it (pre-registered)
    note: str = ""  # one line shown under the row (what else the file measured)
    paper_effect: float | None = None  # the paper's effect, metric units, positive = better for the method
    paper_baseline: str | None = None  # what the paper compared with, where that is not the family's baseline
    min_updates: int | None = None  # fewest optimizer updates a run must make (None: the default fraction)


def parse_role(name: str, spec: dict, where: str) -> str:
    role = spec.get("role", "method")
    if role not in ROLES:
        raise ConfigError(f"{where}: method '{name}': role must be one of {list(ROLES)}, got {role!r}")
    return role


def parse_claim(name: str, raw: Any, where: str) -> Claim | None:
    """The method's claim from its ``claim:`` mapping (None when it has none); errors name the method."""
    if raw is None:
        return None
    at = f"{where}: method '{name}': claim"
    if not isinstance(raw, dict):
        raise ConfigError(f"{at} must be a mapping with keys {sorted(CLAIM_KEYS)}, got {raw!r}")
    extra = sorted(set(raw) - CLAIM_KEYS)
    if extra:
        raise ConfigError(f"{at}: unknown key(s) {extra}; valid: {sorted(CLAIM_KEYS)}")
    for key in ("section", "title", "paper", "metric"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ConfigError(f"{at}: '{key}' must be a non-empty string, got {raw.get(key)!r}")
    direction, versus = raw.get("direction", "better"), raw.get("versus", "baseline")
    if direction not in DIRECTIONS:
        raise ConfigError(f"{at}: direction must be one of {list(DIRECTIONS)}, got {direction!r}")
    if versus not in VERSUS:
        raise ConfigError(f"{at}: versus must be one of {list(VERSUS)}, got {versus!r}")
    margin = raw.get("margin")
    if margin is not None and (not isinstance(margin, (int, float)) or margin <= 0):
        raise ConfigError(f"{at}: margin must be a positive number or null, got {margin!r}")
    if margin is not None and direction == "better":
        raise ConfigError(f"{at}: a margin applies to not_worse / matches claims, not to 'better'")
    for key in ("subset", "not_testable", "note", "paper_baseline"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ConfigError(f"{at}: '{key}' must be a string or null, got {raw[key]!r}")
    effect, updates = raw.get("paper_effect"), raw.get("min_updates")
    if effect is not None and (not isinstance(effect, (int, float)) or isinstance(effect, bool) or effect <= 0):
        raise ConfigError(f"{at}: paper_effect must be a positive number (metric units) or null, got {effect!r}")
    if updates is not None and (not isinstance(updates, int) or isinstance(updates, bool) or updates < 1):
        raise ConfigError(f"{at}: min_updates must be a positive integer or null, got {updates!r}")
    return Claim(method=name, section=raw["section"], title=raw["title"], paper=raw["paper"], metric=raw["metric"],
                 direction=direction, margin=None if margin is None else float(margin), versus=versus,
                 subset=raw.get("subset"), mechanism=_mechanism(raw.get("mechanism"), at),
                 not_testable=raw.get("not_testable"), note=raw.get("note") or "",
                 paper_effect=None if effect is None else float(effect), paper_baseline=raw.get("paper_baseline"),
                 min_updates=updates)


def _mechanism(raw: Any, at: str) -> Mechanism | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("metric"), str):
        raise ConfigError(f"{at}: mechanism must be a mapping with a 'metric' name, got {raw!r}")
    extra = sorted(set(raw) - MECHANISM_KEYS)
    if extra:
        raise ConfigError(f"{at}: mechanism: unknown key(s) {extra}; valid: {sorted(MECHANISM_KEYS)}")
    tests = [k for k in ("above", "below", "vs_baseline") if raw.get(k) is not None]
    if len(tests) != 1:
        raise ConfigError(f"{at}: mechanism needs exactly one of above / below / vs_baseline, got {tests or 'none'}")
    for key in ("above", "below"):
        if raw.get(key) is not None and not isinstance(raw[key], (int, float)):
            raise ConfigError(f"{at}: mechanism {key} must be a number, got {raw[key]!r}")
    if raw.get("vs_baseline") not in (None, "lower", "higher"):
        raise ConfigError(f"{at}: mechanism vs_baseline must be 'lower' or 'higher', got {raw['vs_baseline']!r}")
    return Mechanism(metric=raw["metric"], window=raw.get("window"), above=raw.get("above"),
                     below=raw.get("below"), vs_baseline=raw.get("vs_baseline"), what=str(raw.get("what") or ""))


def parse_rl_seed_offset(name: str, spec: dict, where: str) -> int | None:
    raw = spec.get("rl_seed_offset")
    if raw is not None and (not isinstance(raw, int) or isinstance(raw, bool) or raw == 0):
        raise ConfigError(f"{where}: method '{name}': rl_seed_offset must be a non-zero integer, got {raw!r}")
    return raw


def check_roles(methods: list[tuple[str, str, Claim | None]], baseline: str, where: str) -> None:
    """Controls carry no claim and are not the baseline; the baseline's only claim is its own gain."""
    for name, role, claim in methods:
        if role in ("negative_control", "positive_control"):
            if claim is not None:
                raise ConfigError(f"{where}: method '{name}' is a {role}: it carries no claim")
            if name == baseline:
                raise ConfigError(f"{where}: the baseline '{name}' cannot be a {role}")
        if role == "baseline" and name != baseline:
            raise ConfigError(f"{where}: method '{name}' has role baseline but the file's baseline is '{baseline}'")
        if name == baseline and claim is not None and claim.versus != "warm_start":
            raise ConfigError(f"{where}: the baseline '{name}' can only claim its own gain (versus: warm_start)")
