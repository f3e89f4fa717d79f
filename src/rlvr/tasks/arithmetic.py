"""Arithmetic with digit-by-digit reasoning: the testbed's "mix" of additions and one-digit products."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from rlvr.registry import param, register
from rlvr.tasks.base import Task, TaskConfig, answer_after_marker
from rlvr.types import Problem, Score


@dataclass(frozen=True)
class ArithmeticConfig(TaskConfig):
    min_digits: int = param(2, "fewest digits of a multi-digit operand")
    max_digits: int = param(4, "most digits of a multi-digit operand")
    ops: str = param("+*", "operations drawn uniformly: '+' adds a multi-digit number, '*' multiplies by one digit (2-9)")
    num_operations: int = param(1, "difficulty: operations chained left to right, e.g. 2 gives '(347+285)*3='")
    min_operations: int = param(0, "regime 'long': when > 0, each problem chains a uniform number of operations in "
                                   "[min_operations, num_operations], so completion lengths vary several-fold")
    hard_frac: float = param(0.0, "regime 'hard': this fraction of problems has multi-digit operands of "
                                  "hard_digits digits (meta subset 'hard'); warm starts see them only at hard_demo_frac")
    hard_digits: int = param(6, "digits of the multi-digit operands of 'hard' problems")
    hard_demo_frac: float = param(0.0, "regime 'hard': this fraction of warm-start demonstrations is drawn from the "
                                       "'hard' subset (0 = never demonstrated), so the warm start solves a few")
    pool_size: int = param(0, "regime 'mixed pool': when > 0, RL's training problems come from one fixed pool of "
                              "this many problems (drawn with pool_seed), cycled in a seeded order; the warm start "
                              "and held-out problems are unaffected")
    pool_seed: int = param(0, "seed of the fixed training pool")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.hard_frac <= 1.0 or self.hard_digits < 1:
            raise ValueError(f"arithmetic: need 0 <= hard_frac <= 1 and hard_digits >= 1, got {self.hard_frac}, "
                             f"{self.hard_digits}")
        if not 0.0 <= self.hard_demo_frac <= 1.0 or (self.hard_demo_frac and not self.hard_frac):
            raise ValueError(f"arithmetic: hard_demo_frac must lie in [0, 1] and needs hard_frac > 0, got "
                             f"hard_demo_frac={self.hard_demo_frac}, hard_frac={self.hard_frac}")
        if self.min_operations < 0 or self.min_operations > self.num_operations:
            raise ValueError(f"arithmetic: need 0 <= min_operations <= num_operations, got {self.min_operations}, "
                             f"{self.num_operations}")
        if self.pool_size < 0:
            raise ValueError(f"arithmetic: pool_size must be >= 0, got {self.pool_size}")
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(f"arithmetic: need 1 <= min_digits <= max_digits, got {self.min_digits}, {self.max_digits}")
        if not self.ops or set(self.ops) - set("+*"):
            raise ValueError(f"arithmetic: ops must be a non-empty string over '+*', got '{self.ops}'")
        if self.num_operations < 1:
            raise ValueError(f"arithmetic: num_operations must be >= 1, got {self.num_operations}")


@register("task", "arithmetic")
class Arithmetic(Task):
    """Column addition and multiplication by one digit, worked from the rightmost digit.

    Prompt ``347+285=`` → completion ``7+5=12;4+8+1=13;3+2+1=6;#632``; prompt ``876*2=`` →
    ``6*2=12;7*2+1=15;8*2+1=17;#1752``. A step writes the two digits (the shorter addend padded
    with 0), ``+carry`` when the carry is not 0, and the sum; the last step's sum carries the
    leading digits. Chained problems (``num_operations > 1``) parenthesise left to right,
    ``(347+285)*3=``, and write the intermediate result as a step ``>632`` before going on.
    The verifier reads the number after the last ``#``. ``check_steps`` compares the ``;``-separated
    segments (the ``#answer`` segment counts as the last step) with this canonical demonstration.
    """

    Config = ArithmeticConfig
    needs_timeout = False  # bounded string and integer checks
    has_step_oracle = True
    max_new_tokens = 64

    def sample(self, rng: random.Random) -> Problem:
        cfg = self.config
        hard = cfg.hard_frac > 0 and rng.random() < cfg.hard_frac
        count = rng.randint(cfg.min_operations, cfg.num_operations) if cfg.min_operations else cfg.num_operations
        operands, ops = [self._number(rng, hard)], []
        for _ in range(count):
            op = rng.choice(cfg.ops)
            ops.append(op)
            operands.append(self._number(rng, hard) if op == "+" else rng.randint(2, 9))
        expr = str(operands[0])
        for i, (op, b) in enumerate(zip(ops, operands[1:])):
            expr = f"{expr}{op}{b}" if i == 0 else f"({expr}){op}{b}"
        steps, value = worked_steps(operands, ops)
        meta = {"operands": operands, "ops": ops, **({"subset": "hard" if hard else "base"} if cfg.hard_frac else {})}
        return Problem(prompt=f"{expr}=", answer=str(value), solution=";".join(steps), meta=meta)

    def _number(self, rng: random.Random, hard: bool = False) -> int:
        digits = self.config.hard_digits if hard else rng.randint(self.config.min_digits, self.config.max_digits)
        return rng.randint(10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1)

    def problems(self, n: int, seed: int, split: str = "train") -> list[Problem]:
        """As :meth:`Task.problems`; with ``pool_size`` the train split cycles one fixed pool instead."""
        if not self.config.pool_size or split != "train":
            return super().problems(n, seed, split)
        if getattr(self, "_pool", None) is None:
            self._pool = super().problems(self.config.pool_size, seed=self.config.pool_seed)
        rng = random.Random(f"{self.name}:pool:{seed}")
        out: list[Problem] = []
        while len(out) < n:
            order = self._pool[:]
            rng.shuffle(order)
            out += order[:n - len(out)]
        return [Problem(p.prompt, p.answer, p.solution, p.uid, dict(p.meta)) for p in out]

    def demonstration_problems(self, n: int, seed: int) -> list[Problem]:
        """Warm-start problems: the 'hard' subset is demonstrated in a ``hard_demo_frac`` share of them
        (never by default: the regime is about problems the warm-started policy almost never solves);
        with a ``pool_size`` pool, fresh problems of the open train stream, never the pool's (a warm start
        on the pool memorises its answers and leaves RL nothing to learn on it)."""
        if not self.config.hard_frac and not self.config.pool_size:
            return self.problems(n, seed)
        return self._open_stream(hard_frac=self.config.hard_demo_frac).problems(n, seed)

    def validation_problems(self, n: int, seed: int) -> list[Problem]:
        """As :meth:`Task.validation_problems`; with a pool, from the open train stream (as the
        demonstrations), so the warm start's target measures skill, not the pool's answers by heart."""
        if not self.config.pool_size:
            return self.problems(n, seed)
        return self._open_stream().problems(n, seed)

    def _open_stream(self, **changes: float) -> "Arithmetic":
        """This task without its RL pool (and with ``changes``): the stream warm starts draw from."""
        return type(self)(replace(self.config, pool_size=0, **changes))

    def verify(self, problem: Problem, completion: str) -> Score:
        parsed = answer_after_marker(completion)
        # A second, metric-or-train objective for multi-reward methods: a parsable "#answer".
        objectives = {"format": 1.0 if parsed is not None else 0.0}
        return Score(1.0 if parsed is not None and parsed == problem.answer else 0.0, parsed,
                     {"objectives": objectives})

    def demonstration(self, problem: Problem) -> str:
        if problem.solution:
            return problem.solution
        return ";".join(worked_steps(problem.meta["operands"], problem.meta["ops"])[0])

    def check_steps(self, problem: Problem, completion: str) -> int | None:
        gold = self.demonstration(problem).split(";")
        got = completion.strip().split(";")
        for i, step in enumerate(gold):
            if i >= len(got) or got[i].strip() != step:
                return i
        return None if len(got) == len(gold) else len(gold)


def worked_steps(operands: list[int], ops: list[str]) -> tuple[list[str], int]:
    """The demonstration's segments (ending with ``#answer``) and the final value."""
    steps: list[str] = []
    value = operands[0]
    for i, (op, b) in enumerate(zip(ops, operands[1:])):
        if i > 0:
            steps.append(f">{value}")
        steps += add_steps(value, b) if op == "+" else mul_steps(value, b)
        value = value + b if op == "+" else value * b
    steps.append(f"#{value}")
    return steps, value


def add_steps(a: int, b: int) -> list[str]:
    """``347+285`` → ``['7+5=12', '4+8+1=13', '3+2+1=6']``."""
    da, db = str(a), str(b)
    width = max(len(da), len(db))
    da, db = da.zfill(width), db.zfill(width)
    steps, carry = [], 0
    for x, y in zip(reversed(da), reversed(db)):
        s = int(x) + int(y) + carry
        steps.append(f"{x}+{y}" + (f"+{carry}" if carry else "") + f"={s}")
        carry = s // 10
    return steps


def mul_steps(a: int, d: int) -> list[str]:
    """``876*2`` → ``['6*2=12', '7*2+1=15', '8*2+1=17']``."""
    steps, carry = [], 0
    for x in reversed(str(a)):
        s = int(x) * d + carry
        steps.append(f"{x}*{d}" + (f"+{carry}" if carry else "") + f"={s}")
        carry = s // 10
    return steps
