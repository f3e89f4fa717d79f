"""A tiny, fast run configuration shared by the end-to-end tests."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

from rlvr.registry import param, register
from rlvr.tasks import Task
from rlvr.tasks.base import TaskConfig
from rlvr.train.config import Config, load_config
from rlvr.types import Problem, Score


@dataclass(frozen=True)
class DigitConfig(TaskConfig):
    digit: str = param("7", "the digit a completion must contain")
    second_digit: str = param("", "when set, a second objective 'second_digit': the completion contains it "
                                  "(for multi-objective methods)")


@register("task", "toy_digit_test")
class ToyDigit(Task):
    """Reward 1 when the completion contains a given digit: an untrained tiny model already
    succeeds sometimes, so groups have mixed rewards and every step has a learning signal.

    Differs from arithmetic: a trivial check, for tests only. Shapes: n/a.
    """

    Config = DigitConfig
    needs_timeout = False
    has_step_oracle = True  # one "step": the completion contains the digit or it does not

    def sample(self, rng: random.Random) -> Problem:
        # A three-step "solution" so hint samplers (OC-GRPO) have guidance to cut at a step boundary.
        return Problem(prompt=f"{rng.randint(0, 10**6)}:", answer=self.config.digit,
                       solution=f"{rng.randint(0, 9)};{rng.randint(0, 9)};{self.config.digit}")

    def verify(self, problem: Problem, completion: str) -> Score:
        extra = str(self.config.second_digit)
        meta = {"objectives": {"second_digit": float(extra in completion)}} if extra else {}
        return Score(float(self.config.digit in completion), parsed=completion[:4], meta=meta)

    def demonstration(self, problem: Problem) -> str:
        return f"{problem.answer}"

    def check_steps(self, problem: Problem, completion: str) -> int | None:
        return None if self.config.digit in completion else 0


@register("task", "toy_mixed_test")
class ToyMixed(ToyDigit):
    """ToyDigit whose verdict alternates 1, 0, 1, 0, ... over the completions of each prompt, in the
    order they are verified (in-process and in row order: ``needs_timeout = False``). Every group of an
    even size therefore has mixed rewards whatever tokens the model samples, so a mechanism that needs a
    learning signal fires by construction, on any CPU and thread count (toy_digit_test's "contains 7"
    succeeds for about 1 completion in 16 on the untrained model: whether a step gets a mixed group is
    luck, and a float rounding difference that flips one sampled token changes it).

    Differs from toy_digit_test: the verdict ignores the text. Shapes: n/a.
    """

    def verify(self, problem: Problem, completion: str) -> Score:
        seen = self.__dict__.setdefault("_verified", {})  # prompt -> completions verified so far
        k = seen.get(problem.prompt, 0)
        seen[problem.prompt] = k + 1
        plain = super().verify(problem, completion)
        return Score(float(k % 2 == 0), parsed=plain.parsed, meta=plain.meta)


@register("task", "toy_coin_test")
class ToyCoin(ToyDigit):
    """ToyDigit whose verdict is a fair coin keyed by the text: 1 when the CRC-32 of the completion is
    odd. Stateless (the same on every rank and process), and about half of any set of distinct texts
    scores 1 whatever the model, so fitness that depends on what was sampled varies by construction
    (with "contains 7", ~1 completion in 16, whole ES steps scored 0 for some seeds and CPUs).

    Differs from toy_digit_test: the verdict is a hash of the text. Shapes: n/a.
    """

    def verify(self, problem: Problem, completion: str) -> Score:
        plain = super().verify(problem, completion)
        return Score(float(zlib.crc32(completion.encode()) % 2), parsed=plain.parsed, meta=plain.meta)


TINY = {
    "task": {"name": "toy_digit_test"},
    "model": {"hidden": 32, "layers": 1, "heads": 2},
    "warm_start": {"steps": 0},
    "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 12},
    "optim": {"lr": 1e-3},
    "run": {"steps": 3, "eval_every": 0, "eval_problems": 8, "eval_k": 2, "save_every": 0, "threads": 1},
}


def tiny_config(out_dir: str, overrides: list[str] | None = None, path: str | None = None) -> Config:
    base = {**TINY, "run": {**TINY["run"], "out_dir": str(out_dir)}}
    return load_config(path, overrides, base=base)
