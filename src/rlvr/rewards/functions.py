"""Reward functions as TRL users write them: ``func(prompts, completions, **columns) -> list[float | None]``.

Config: ``algorithm.rewards: [{fn: "pkg.module:func", weight: 1.0, name: optional}, ...]``. Each
function is one more named objective beside the task's verdict (``batch.rewards`` gets a column,
``batch.reward_names`` its name, so ``gdpo`` / ``sa_mrpo`` see it) and a ``reward/<name>`` metric.

Calling convention (TRL's ``GRPOTrainer._calculate_rewards``): keyword arguments ``prompts`` (the
problem's prompt text), ``completions`` (the completion text), and one list per extra column: the
problem's ``answer`` and every ``Problem.meta`` entry (the dataset task's ``meta_columns`` land
there). A function may be ``async def``. rlvr calls it once per completion (lists of length 1), in
the verifier pool under ``rollout.verify_timeout_s``, so a slow or failing row costs only that row.

Outcomes: ``None`` means "no reward from this function for this row"; TRL stores NaN and takes a
``nansum`` over weighted functions, so the row's weighted reward gets nothing from it: here the
column holds 0.0, the same weighted sum. A function that raises, hangs past the limit, returns
the wrong length or a non-finite value scores 0.0 for that row with the reason in the row's
verifier errors (``reward/verifier_errors``, ``samples.jsonl``), like a verifier. A function that
fails on every row of a batch is broken rather than unlucky: the run goes on (its column is 0), but
the console says so once per function, with the first reason (``warn_all_failed``).

Weights: the objectives are ``[correct, *task objectives, *functions]``. ``algorithm.reward_weights``
weights ``[correct, *task objectives]`` as before (empty: correct 1, task objectives 0); each
function brings its own ``weight``. ``reward_weights: [0]`` with functions is TRL's setting: the
reward is the weighted sum of the functions alone.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable

from rlvr.notice import notice
from rlvr.registry import RegistryError, _import_object
from rlvr.sandbox.safe import guarded, sendable
from rlvr.types import Problem

RESERVED = ("correct", "mean", "std", "verifier_errors")
_SPEC_KEYS = ("fn", "weight", "name")


@dataclass(frozen=True)
class RewardFunction:
    """One configured function: its import path, weight in the scalar reward, objective name."""

    fn: str
    weight: float
    name: str
    func: Callable[..., Any]


def reward_functions(items: list) -> list[RewardFunction]:
    """``algorithm.rewards`` entries as ``RewardFunction``s, imported now so a bad one fails first."""
    out: list[RewardFunction] = []
    for i, item in enumerate(items or []):
        where = f"algorithm.rewards[{i}]"
        if not isinstance(item, dict) or "fn" not in item:
            raise ValueError(f"{where}: expected {{fn: 'pkg.module:func', weight: 1.0, name: optional}}, got {item!r}")
        unknown = sorted(set(item) - set(_SPEC_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; valid: {list(_SPEC_KEYS)}")
        path = str(item["fn"])
        if ":" not in path:
            raise ValueError(f"{where}: fn must be 'pkg.module:func', got '{path}'")
        try:
            func = _import_object(path)
        except RegistryError as err:
            raise ValueError(f"{where}: {err}") from None
        if not callable(func):
            raise ValueError(f"{where}: '{path}' is not callable")
        weight = float(item.get("weight", 1.0))
        if not math.isfinite(weight):
            raise ValueError(f"{where}: weight must be finite, got {weight}")
        name = str(item.get("name") or getattr(func, "__name__", path.rpartition(":")[2]))
        if name in RESERVED or name in [f.name for f in out]:
            raise ValueError(f"{where}: name '{name}' is taken (reserved: {list(RESERVED)}, or used twice); "
                             f"set a distinct `name`")
        out.append(RewardFunction(path, weight, name, func))
    return out


def score_functions(functions: list[RewardFunction], problems: list[Problem], texts: list[str],
                    timeout_s: float | None, pool: Any = None) -> tuple[list[list[float]], dict[int, str]]:
    """Every function on every row: values ``(N, F)`` and the reasons of rows that scored 0 by failing.
    All (function, row) calls go to ``pool`` at once; a function that cannot be sent runs in-process."""
    args = [(p.prompt, t, columns(p)) for p, t in zip(problems, texts)]
    pooled = [j for j, fn in enumerate(functions) if pool is not None and args
              and sendable(pool, ("reward", fn.fn), fn.func, f"reward function '{fn.name}'")]
    calls = [(_reward_op, ("reward", functions[j].fn), functions[j].func, a) for j in pooled for a in args]
    done = iter(pool.run(calls, timeout_s) if calls else [])
    values = [[0.0] * len(functions) for _ in problems]
    errors: dict[int, list[str]] = {}
    for j, fn in enumerate(functions):
        reasons = []
        for i, a in enumerate(args):
            outcome = next(done) if j in pooled else guarded(_reward_op, (fn.func, *a), timeout_s)
            values[i][j], reason = _as_reward(outcome)
            if reason:
                errors.setdefault(i, []).append(f"reward '{fn.name}': {reason}")
                reasons.append(reason)
        if args and len(reasons) == len(args):
            warn_all_failed(fn, len(args), reasons[0])
    return values, {i: "; ".join(r) for i, r in errors.items()}


_WARNED: set[tuple[str, str]] = set()  # (name, fn) of functions already reported failing everywhere


def warn_all_failed(fn: RewardFunction, rows: int, reason: str) -> None:
    """Say (once per function and process) that ``fn`` failed on every one of a batch's ``rows``."""
    if (fn.name, fn.fn) in _WARNED:
        return
    _WARNED.add((fn.name, fn.fn))
    notice(f"WARNING: reward function '{fn.name}' ({fn.fn}) failed on all {rows} completions of a batch, so it "
           f"adds 0 to every reward: {reason[:200]} (each row's reason: samples.jsonl, verifier_error)")


def columns(problem: Problem) -> dict[str, Any]:
    """The extra columns a function receives for ``problem`` (one value each; listed by the caller)."""
    extra = {k: v for k, v in problem.meta.items() if k not in ("prompts", "completions")}
    return {"answer": problem.answer, **extra}


def objective_weights(names: list[str], reward_weights: list, functions: list[RewardFunction]) -> list[float] | None:
    """The weight of each objective in ``names`` (module doc), or None (first objective alone)
    when there are no functions and no ``reward_weights``."""
    if not functions:
        return list(reward_weights) or None
    by_name = {f.name: f.weight for f in functions}
    others = [n for n in names if n not in by_name]
    base = list(reward_weights) or [1.0] + [0.0] * (len(others) - 1)
    if len(base) != len(others):
        raise ValueError(f"algorithm.reward_weights has {len(base)} entries but the task gives {len(others)} "
                         f"objectives {others} (reward functions {list(by_name)} bring their own weights)")
    weights, it = [], iter(base)
    for n in names:
        weights.append(by_name[n] if n in by_name else float(next(it)))
    return weights


def _reward_op(func: Callable[..., Any], prompt: str, completion: str, cols: dict[str, Any]) -> Any:
    out = func(prompts=[prompt], completions=[completion], **{k: [v] for k, v in cols.items()})
    if inspect.isawaitable(out):
        out = asyncio.run(_wait(out))
    return out


async def _wait(awaitable: Any) -> Any:
    return await awaitable


def _as_reward(outcome: tuple[str, Any]) -> tuple[float, str | None]:
    status, out = outcome
    if status == "error":
        return 0.0, str(out)
    if not isinstance(out, (list, tuple)) or len(out) != 1:
        return 0.0, f"returned {type(out).__name__} {str(out)[:60]}, not a list with one value per completion"
    value = out[0]
    if value is None:
        return 0.0, None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return 0.0, f"returned {type(out[0]).__name__}, not a number"
    return (value, None) if math.isfinite(value) else (0.0, f"non-finite reward {value!r}")


__all__ = ["RewardFunction", "columns", "objective_weights", "reward_functions", "score_functions"]
