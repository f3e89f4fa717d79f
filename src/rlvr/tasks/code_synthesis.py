"""Write a one-line Python function from input/output examples; verified by running it (testbed task).

Prompt ``f(0)=1;f(1)=4;f(7)=22;def f(x):`` → completion ``return 3*x+1``. The program
``def f(x):\\n    <completion>`` runs in the sandbox through the ``code`` verifier on held-out
inputs the prompt does not show, so a completion that only reproduces the shown pairs fails.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from rlvr.registry import param, register
from rlvr.tasks.base import Task, TaskConfig
from rlvr.types import Problem, Score

FAMILIES = ("lin", "sq", "mod")


@dataclass(frozen=True)
class CodeSynthesisConfig(TaskConfig):
    families: str = param("lin", "comma-separated function families: lin (a*x+b, a in 1..max_coef, b in "
                                 "0..max_coef), sq (x*x+b), mod (x%m, m in 2..max_coef)")
    max_coef: int = param(9, "largest coefficient a, offset b and modulus m")
    shown: int = param(3, "input/output examples in the prompt (inputs distinct, from 0..9)")
    anchor: bool = param(True, "always show f(0) and f(1) (a linear function's offset and slope can be read off "
                               "them); false: every shown input is drawn from 0..9")
    held_out: int = param(4, "inputs the program is tested on (from 10..30, never shown)")
    partial: bool = param(False, "reward the fraction of held-out inputs passed instead of all-or-nothing")
    timeout_s: float = param(4.0, "wall-clock limit of one verification (keep below rollout.verify_timeout_s)")

    def __post_init__(self) -> None:
        super().__post_init__()
        names = [f for f in self.families.split(",") if f]
        if not names or set(names) - set(FAMILIES):
            raise ValueError(f"code_synthesis: families must be a comma-separated subset of {FAMILIES}, "
                             f"got {self.families!r}")
        if not 2 <= self.max_coef <= 99 or not 1 + self.anchor <= self.shown <= 10 or not 1 <= self.held_out <= 21:
            raise ValueError(f"code_synthesis: need 2 <= max_coef <= 99, 1 <= shown <= 10, 1 <= held_out <= 21; "
                             f"got {self.max_coef}, {self.shown}, {self.held_out}")


@register("task", "code_synthesis")
class CodeSynthesis(Task):
    """One-line Python functions from examples, checked by the sandboxed ``code`` verifier.

    ``sample`` draws a family and its constants, ``shown`` example inputs (0..9; 0 and 1 among them
    with ``anchor``) and ``held_out``
    test inputs (10..30); ``Problem.meta["code"]`` holds the held-out asserts and ``solution`` the
    canonical line (``return 3*x+1``), the warm start's demonstration. Any equivalent line passes.
    Differs from ``arithmetic``: the verdict comes from running the completion (a child process
    per completion, so verification is slower: ``needs_timeout``, verified in the pool), and there
    is no per-step oracle. Shapes: one (problem, completion) → one Score.
    """

    Config = CodeSynthesisConfig
    needs_timeout = True
    max_new_tokens = 24

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._verifier: Any = None

    def sample(self, rng: random.Random) -> Problem:
        cfg = self.config
        family = rng.choice([f for f in cfg.families.split(",") if f])
        body, fn = _function(family, rng, cfg.max_coef)
        shown = [0, 1] + sorted(rng.sample(range(2, 10), cfg.shown - 2)) if cfg.anchor else \
            sorted(rng.sample(range(10), cfg.shown))
        tests = rng.sample(range(10, 31), cfg.held_out)
        prompt = "".join(f"f({x})={fn(x)};" for x in shown) + "def f(x):"
        spec = {"mode": "assert", "prefix": "", "tests": [f"assert f({x}) == {fn(x)}" for x in tests]}
        return Problem(prompt, f"return {body}", f"return {body}", meta={"code": spec, "family": family})

    def program(self, completion: str) -> str:
        """The completion as the body of ``def f(x):`` (every line indented one level)."""
        lines = completion.strip("\n").split("\n") or [""]
        return "def f(x):\n" + "".join(f"    {line}\n" for line in lines)

    def verify(self, problem: Problem, completion: str) -> Score:
        if self._verifier is None:
            from rlvr.registry import build

            self._verifier = build("verifier", "code", timeout_s=self.config.timeout_s, partial=self.config.partial,
                                   test_timeout_s=min(1.0, self.config.timeout_s), extract="full")
        return self._verifier.score(problem, self.program(completion.strip()))

    def demonstration(self, problem: Problem) -> str:
        return problem.solution or ""


def _function(family: str, rng: random.Random, k: int) -> tuple[str, Any]:
    """(canonical expression, the function) of one draw from ``family``."""
    if family == "sq":
        b = rng.randint(0, k)
        return (f"x*x+{b}" if b else "x*x"), (lambda x: x * x + b)
    if family == "mod":
        m = rng.randint(2, k)
        return f"x%{m}", (lambda x: x % m)
    a, b = rng.randint(1, k), rng.randint(0, k)
    head = "x" if a == 1 else f"{a}*x"
    return (f"{head}+{b}" if b else head), (lambda x: a * x + b)
