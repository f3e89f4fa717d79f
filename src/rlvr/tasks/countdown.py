"""Countdown: reach a target from given numbers with +, − and ×, each number used at most once."""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from rlvr.registry import param, register
from rlvr.tasks.base import Task, TaskConfig, answer_after_marker
from rlvr.types import Problem, Score

_STEP = re.compile(r"^(\d+)([+\-*])(\d+)=(\d+)$")


@dataclass(frozen=True)
class CountdownConfig(TaskConfig):
    min_numbers: int = param(3, "fewest given numbers")
    max_numbers: int = param(4, "most given numbers")
    max_value: int = param(10, "given numbers are drawn from 1..max_value")
    max_target: int = param(100, "targets are in 1..max_target")
    ops: str = param("+-*", "operations used to build targets (the verifier accepts any of + - *)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 2 <= self.min_numbers <= self.max_numbers:
            raise ValueError(f"countdown: need 2 <= min_numbers <= max_numbers, got {self.min_numbers}, {self.max_numbers}")
        if self.max_value < 1 or self.max_target < 1:
            raise ValueError("countdown: max_value and max_target must be >= 1")
        if not self.ops or set(self.ops) - set("+-*"):
            raise ValueError(f"countdown: ops must be a non-empty string over '+-*', got '{self.ops}'")


@register("task", "countdown")
class Countdown(Task):
    """Combine the given numbers into the target.

    Prompt ``3,5,7,2>23:`` (numbers, ``>``, target, ``:``). Completion: steps ``a op b=c`` joined by
    ``;`` and the answer after ``#``, e.g. ``3*7=21;21+2=23;#23``. Each step's operands must come
    from the pool (the unused given numbers and unused results of earlier steps; each use removes
    one copy), the arithmetic must be exact with non-negative results, and the answer must equal
    the target and be in the final pool. Numbers need not all be used. ``check_steps`` returns the first malformed or wrong step, or
    the first step after which the target can no longer be reached (exhaustive search), or the
    answer segment's index when the steps are fine but the answer is not.
    """

    Config = CountdownConfig
    needs_timeout = False  # bounded string and integer checks
    has_step_oracle = True
    max_new_tokens = 64

    def sample(self, rng: random.Random) -> Problem:
        cfg = self.config
        for _ in range(1000):
            numbers = [rng.randint(1, cfg.max_value) for _ in range(rng.randint(cfg.min_numbers, cfg.max_numbers))]
            steps, value = _random_chain(numbers, cfg.ops, rng)
            if 1 <= value <= cfg.max_target and value not in numbers:
                prompt = ",".join(map(str, numbers)) + f">{value}:"
                return Problem(prompt=prompt, answer=str(value), solution=";".join(steps + [f"#{value}"]),
                               meta={"numbers": numbers, "target": value})
        raise ValueError("countdown: could not build a problem; raise max_target or max_value")

    def verify(self, problem: Problem, completion: str) -> Score:
        numbers, target = _numbers_target(problem)
        steps, answer_seg = _segments(completion)
        parsed = answer_after_marker(completion)
        pool, error = _apply(Counter(numbers), steps)
        if error is not None:
            return Score(0.0, parsed, {"reason": error[1]})
        ok = parsed is not None and int(parsed) == target and pool[target] > 0 and answer_seg is not None
        return Score(1.0 if ok else 0.0, parsed, {} if ok else {"reason": "answer is not the target"})

    def demonstration(self, problem: Problem) -> str:
        if problem.solution:
            return problem.solution
        numbers, target = _numbers_target(problem)
        steps = _solve(tuple(sorted(numbers)), target)
        if steps is None:
            raise ValueError(f"countdown: {problem.prompt} has no solution")
        return ";".join(list(steps) + [f"#{target}"])

    def check_steps(self, problem: Problem, completion: str) -> int | None:
        numbers, target = _numbers_target(problem)
        steps, _ = _segments(completion)
        pool: Counter = Counter(numbers)
        for i, step in enumerate(steps):
            pool, error = _apply(pool, [step])
            if error is not None or _solve(tuple(sorted(pool.elements())), target) is None:
                return i
        return None if self.verify(problem, completion).value == 1.0 else len(steps)


def _random_chain(numbers: list[int], ops: str, rng: random.Random) -> tuple[list[str], int]:
    """Fold the numbers (shuffled) left to right with random ops, keeping every result >= 0."""
    order = numbers[:]
    rng.shuffle(order)
    value, steps = order[0], []
    for b in order[1:]:
        op = rng.choice(ops)
        a, c = (value, b) if op != "-" or value >= b else (b, value)
        result = a + c if op == "+" else a - c if op == "-" else a * c
        steps.append(f"{a}{op}{c}={result}")
        value = result
    return steps, value


def _numbers_target(problem: Problem) -> tuple[list[int], int]:
    if "numbers" in problem.meta:
        return list(problem.meta["numbers"]), int(problem.meta["target"])
    head, _, tail = problem.prompt.partition(">")
    return [int(x) for x in head.split(",")], int(tail.rstrip(":"))


def _segments(completion: str) -> tuple[list[str], str | None]:
    """Step segments before the first ``#`` segment, and that answer segment (None if absent)."""
    steps = []
    for seg in completion.strip().split(";"):
        seg = seg.strip()
        if seg.startswith("#"):
            return steps, seg
        steps.append(seg)
    return steps, None


def _apply(pool: Counter, steps: list[str]) -> tuple[Counter, tuple[int, str] | None]:
    """Play the steps on a copy of the pool; the error names the first bad step."""
    pool = Counter(pool)
    for i, step in enumerate(steps):
        m = _STEP.match(step)
        if m is None:
            return pool, (i, f"step {i} '{step}' is not 'a op b=c'")
        a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
        pool[a] -= 1
        pool[b] -= 1
        if pool[a] < 0 or pool[b] < 0:
            return pool, (i, f"step {i} '{step}' uses a number that is not available")
        if (a + b if op == "+" else a - b if op == "-" else a * b) != c:
            return pool, (i, f"step {i} '{step}' has wrong arithmetic")
        pool[c] += 1
    return +pool, None


@lru_cache(maxsize=65536)
def _solve(pool: tuple[int, ...], target: int) -> tuple[str, ...] | None:
    """Steps that reach ``target`` from the sorted ``pool`` (() if it is already there), or None."""
    if target in pool:
        return ()
    for i in range(len(pool)):
        for j in range(i + 1, len(pool)):
            a, b = max(pool[i], pool[j]), min(pool[i], pool[j])
            rest = pool[:i] + pool[i + 1:j] + pool[j + 1:]
            for op, c in (("+", a + b), ("*", a * b), ("-", a - b)):
                found = _solve(tuple(sorted(rest + (c,))), target)
                if found is not None:
                    return (f"{a}{op}{b}={c}",) + found
    return None
