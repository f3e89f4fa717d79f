"""LURE pursuit environments (docs/methods.md §2.7): a task at an evader-chosen difficulty, solved by a
planner–executor pursuer step by step under a verifier of progress.

An episode: ``reset`` shows the task prompt; turn 1 is the **planner**'s (a plan: the sub-goals it
will work through); every later turn is the **executor**'s (one or more worked steps, ``;``-separated,
the last one ``#answer``). After each executor turn the verifier scores progress ``v`` = the
fraction of the gold worked steps that the executor's steps so far get right from the start; the
episode ends at the answer (captured when it is right), at the first wrong step (the task escaped),
or at the sampler's turn limit. The plan is checked against the task's own plan (``info["plan_ok"]``)
but earns no progress itself: its tokens are credited with everything that follows (capture-anchored
returns, ``rlvr.envs.lure_credit``).

Difficulty axes: ``lure_arithmetic`` — operand digits (level d: two d-digit addends);
``lure_countdown`` — how many numbers are given (level d: d + 1 numbers).
"""

from __future__ import annotations

import random
from abc import abstractmethod
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rlvr.envs.base import EnvError, Environment, register_env
from rlvr.registry import param
from rlvr.tasks.arithmetic import Arithmetic, ArithmeticConfig
from rlvr.tasks.countdown import Countdown, CountdownConfig, _apply, _solve
from rlvr.tasks.base import answer_after_marker
from rlvr.types import Problem

PLANNER, EXECUTOR = "planner", "executor"
PLAN_END, STEP_SEP = "\n", ";"  # observations: after the plan, and between executor turns


@dataclass(frozen=True)
class LureEnvConfig:
    levels: int = param(4, "positions on the difficulty axis: the evader picks a level in 1..levels")


class LureEnvironment(Environment):
    """A pursuit episode on a task the evader placed at ``problem.meta['level']``."""

    Config = LureEnvConfig
    short: str = ""  # the name the evader's prompt uses

    # --- the difficulty axis ----------------------------------------------------------------

    @abstractmethod
    def task_at(self, level: int, rng: random.Random) -> Problem:
        """A random task at difficulty ``level`` (1 = easiest)."""

    @abstractmethod
    def gold_steps(self, problem: Problem) -> list[str]:
        """The task's worked steps, the last one ``#answer``."""

    @abstractmethod
    def plan_of(self, problem: Problem) -> str:
        """The task's own plan (the sub-goals), what a planner should write."""

    @abstractmethod
    def good_prefix(self, problem: Problem, steps: list[str]) -> int:
        """How many of ``steps`` are right from the start (a wrong step ends the count)."""

    def demonstration_turns(self, problem: Problem) -> list[str]:
        """A perfect episode's actions: the plan, then one worked step per executor turn."""
        return [self.plan_of(problem), *self.gold_steps(problem)]

    # --- the episode ------------------------------------------------------------------------

    def reset(self, problem: Problem, seed: int) -> str:
        if "level" not in problem.meta:
            raise EnvError(f"{self.registered_name}: the problem has no meta['level'] (make it with task_at)")
        self._problem, self._steps, self._turns, self._done = problem, [], 0, False
        self._total = len(self.gold_steps(problem))
        self.info = {"level": problem.meta["level"], "plan_ok": False, "captured": False, "progress": 0.0}
        return problem.prompt

    def role(self) -> str:
        return PLANNER if getattr(self, "_turns", 0) == 0 else EXECUTOR

    def step(self, action: str) -> tuple[str, float, bool]:
        if not hasattr(self, "_problem"):
            raise EnvError(f"{self.registered_name}: step before reset")
        if self._done:
            raise EnvError(f"{self.registered_name}: step after the episode ended")
        self._turns += 1
        if self._turns == 1:
            self.info["plan_ok"] = action.strip() == self.plan_of(self._problem)
            return PLAN_END, 0.0, False
        self._steps += [s.strip() for s in action.split(STEP_SEP) if s.strip()]
        good = self.good_prefix(self._problem, self._steps)
        answered = any(s.startswith("#") for s in self._steps)
        captured = answered and good == len(self._steps)  # every step right, the answer included
        progress = 1.0 if captured else min(good, self._total - 1) / self._total
        self.info.update(captured=captured, progress=progress)
        self._done = answered or good < len(self._steps)
        return STEP_SEP, progress, self._done


@dataclass(frozen=True)
class LureArithmeticConfig(LureEnvConfig):
    levels: int = param(4, "difficulty axis: level d adds two d-digit numbers, d in 1..levels")


@register_env("lure_arithmetic")
class LureArithmetic(LureEnvironment):
    """Column addition; the plan lists the digit pairs right to left (``7+5,4+8,3+2`` for 347+285)."""

    Config = LureArithmeticConfig
    short = "arithmetic"

    def task_at(self, level: int, rng: random.Random) -> Problem:
        task = Arithmetic(ArithmeticConfig(min_digits=level, max_digits=level, ops="+"))
        p = task.sample(rng)
        p.meta.update(level=level, lure_env=self.registered_name)
        return p

    def gold_steps(self, problem: Problem) -> list[str]:
        return Arithmetic().demonstration(problem).split(";")

    def plan_of(self, problem: Problem) -> str:
        return ",".join(s.split("=")[0].rsplit("+", 1)[0] if s.count("+") > 1 else s.split("=")[0]
                        for s in self.gold_steps(problem)[:-1])

    def good_prefix(self, problem: Problem, steps: list[str]) -> int:
        gold = self.gold_steps(problem)
        n = 0
        while n < len(steps) and n < len(gold) and steps[n] == gold[n]:
            n += 1
        return n


@dataclass(frozen=True)
class LureCountdownConfig(LureEnvConfig):
    levels: int = param(3, "difficulty axis: level d gives d + 1 numbers, d in 1..levels")
    max_value: int = param(9, "given numbers are drawn from 1..max_value")


@register_env("lure_countdown")
class LureCountdown(LureEnvironment):
    """Countdown; the plan lists the numbers the solution combines (``3,7,2``).

    A step is right when it is valid arithmetic on available numbers and the target stays reachable;
    the answer step is right when it names the target and the target is available."""

    Config = LureCountdownConfig
    short = "countdown"

    def task_at(self, level: int, rng: random.Random) -> Problem:
        n = level + 1
        task = Countdown(CountdownConfig(min_numbers=n, max_numbers=n, max_value=self.config.max_value,
                                         max_target=self.config.max_value ** 2 * 4))
        p = task.sample(rng)
        p.meta.update(level=level, lure_env=self.registered_name)
        return p

    def gold_steps(self, problem: Problem) -> list[str]:
        return Countdown().demonstration(problem).split(";")

    def plan_of(self, problem: Problem) -> str:
        numbers = Counter(problem.meta["numbers"])
        used = []
        for step in self.gold_steps(problem)[:-1]:
            lhs = step.split("=")[0]
            for tok in lhs.replace("*", " ").replace("+", " ").replace("-", " ").split():
                if numbers[int(tok)] > 0:  # a given number (results of earlier steps are not)
                    numbers[int(tok)] -= 1
                    used.append(tok)
        return ",".join(used)

    def good_prefix(self, problem: Problem, steps: list[str]) -> int:
        pool: Any = Counter(problem.meta["numbers"])
        target = int(problem.meta["target"])
        for i, step in enumerate(steps):
            if step.startswith("#"):
                ok = answer_after_marker(step) == str(target) and pool[target] > 0
                return i + 1 if ok else i
            pool, error = _apply(pool, [step])
            if error is not None or _solve(tuple(sorted(pool.elements())), target) is None:
                return i
        return len(steps)


LURE_ENVS = ("lure_arithmetic", "lure_countdown")
