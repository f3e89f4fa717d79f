"""The task protocol: problems with a verifiable answer, worked demonstrations and a step checker.

Train / held-out separation: every prompt belongs to exactly one split, decided by a stable hash
of the prompt text (``split_of``): a fraction ``test_fraction`` of the prompt space is held out.
``problems(n, seed, split)`` draws from the generator stream ``"<task>:<split>:<seed>"`` and keeps
only prompts of the requested split, de-duplicated within the call. So no training batch, at any
seed, ever contains a held-out prompt, and no bookkeeping of past batches is needed.
"""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from rlvr.plugin import Plugin
from rlvr.registry import param
from rlvr.types import Problem, Score

SPLITS = ("train", "test")


@dataclass(frozen=True)
class TaskConfig:
    test_fraction: float = param(0.1, "fraction of the prompt space held out for evaluation (by prompt hash)")

    def __post_init__(self) -> None:
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")


class Task(Plugin, ABC):
    """A source of verifiable problems. Subclasses implement ``sample``, ``verify``, ``demonstration``
    and, where a per-step oracle exists, ``check_steps``."""

    Config: ClassVar[type] = TaskConfig
    max_new_tokens: ClassVar[int] = 64  # a generation budget that fits every demonstration
    # A time limit guards ``verify`` unless a task declares its checks bounded (the synthetic ones do).
    needs_timeout: ClassVar[bool] = True
    has_step_oracle: ClassVar[bool] = False  # True when ``check_steps`` can judge reasoning steps
    # Why this task needs the tiny testbed model (a run with model.path set refuses it at validation); "" = any.
    testbed_only: ClassVar[str] = ""

    @property
    def name(self) -> str:
        return getattr(self, "registered_name", type(self).__name__)

    def problems(self, n: int, seed: int, split: str = "train") -> list[Problem]:
        """``n`` distinct problems of ``split`` from the stream of ``seed`` (same call, same list)."""
        _check_split(split)
        rng = random.Random(f"{self.name}:{split}:{seed}")
        out: list[Problem] = []
        seen: set[str] = set()
        for _ in range(100 * n + 1000):
            if len(out) == n:
                return out
            problem = self.sample(rng)
            if problem.prompt in seen or self.split_of(problem.prompt) != split:
                continue
            seen.add(problem.prompt)
            problem.uid = problem.uid or f"{self.name}:{prompt_hash(problem.prompt):016x}"
            problem.meta.setdefault("split", split)
            out.append(problem)
        if len(out) == n:
            return out
        raise ValueError(f"task '{self.name}': could not draw {n} distinct {split} problems "
                         f"(got {len(out)}); the problem space is too small for this config")

    def demonstration_problems(self, n: int, seed: int) -> list[Problem]:
        """Problems for the supervised warm start (default: the train split, as ``problems``); a task
        may keep a subset out of the demonstrations (arithmetic's 'hard' regime)."""
        return self.problems(n, seed)

    def validation_problems(self, n: int, seed: int) -> list[Problem]:
        """Problems the warm start's accuracy target is checked on (default: the train split, as
        ``problems``; never the held-out split)."""
        return self.problems(n, seed)

    def split_of(self, prompt: str) -> str:
        """'test' for the held-out part of the prompt space, else 'train'."""
        return "test" if prompt_hash(prompt) / 2.0**64 < self.config.test_fraction else "train"

    @abstractmethod
    def sample(self, rng: random.Random) -> Problem:
        """One random problem (split filtering and de-duplication happen in ``problems``)."""

    @abstractmethod
    def verify(self, problem: Problem, completion: str) -> Score:
        """Reward 1.0 or 0.0; ``Score.parsed`` is the extracted answer (None if there is none)."""

    @abstractmethod
    def demonstration(self, problem: Problem) -> str:
        """A correct worked completion (without eos)."""

    def check_steps(self, problem: Problem, completion: str) -> int | None:
        """Index of the first wrong reasoning step, None when every step is right."""
        raise StepOracleError(f"task '{self.name}' has no per-step checker (has_step_oracle=False); "
                              f"methods that need a first-mistake oracle cannot use it")


class StepOracleError(ValueError):
    """The task cannot judge individual reasoning steps."""


def prompt_hash(prompt: str) -> int:
    """A stable 64-bit hash of a prompt (Python's ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(prompt.encode("utf-8"), digest_size=8).digest(), "big")


def answer_after_marker(completion: str, marker: str = "#") -> str | None:
    """The digits right after the last ``marker`` (leading spaces skipped), or None."""
    at = completion.rfind(marker)
    if at < 0:
        return None
    rest = completion[at + len(marker):].lstrip()
    digits = rest[:len(rest) - len(rest.lstrip("0123456789"))]
    return digits or None


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split '{split}'; valid: {', '.join(SPLITS)}")
