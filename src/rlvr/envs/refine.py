"""Verifier-guided refinement of worked arithmetic: answer, get partial credit, try again (TCPO's setting)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from rlvr.envs.base import EnvError, Environment, episode_of, episode_score, register_env
from rlvr.registry import param, register
from rlvr.tasks.arithmetic import Arithmetic, ArithmeticConfig
from rlvr.types import Problem, Score



@dataclass(frozen=True)
class RefineConfig:
    feedback: str = param("\n{correct}/{total} {prompt}", "the observation after an unsolved attempt; fields "
                                                          "{correct} (leading steps right), {total} (steps) and "
                                                          "{prompt} (the problem again, so the next turn answers it)")
    stop_when_solved: bool = param(True, "end the episode at the first fully correct attempt")
    max_attempts: int = param(0, "the environment's own turn limit; 0 = none (the sampler's max_turns rules)")

    def __post_init__(self) -> None:
        if self.max_attempts < 0:
            raise ValueError(f"refine_arithmetic: max_attempts must be >= 0, got {self.max_attempts}")


def partial_credit(problem: Problem, attempt: str) -> tuple[float, int, int]:
    """(score, correct, total): ``correct`` = the worked steps right before the first wrong one (by
    ``Arithmetic.check_steps``; the ``#answer`` segment is the last step), ``total`` = the gold steps.
    score = 1 only for an exact attempt; an attempt with every step right plus extra segments gets
    (total − 1)/total, so trailing junk never scores full marks."""
    oracle = Arithmetic()
    total = len(oracle.demonstration(problem).split(";"))
    first_wrong = oracle.check_steps(problem, attempt)
    if first_wrong is None:
        return 1.0, total, total
    correct = min(first_wrong, total - 1)
    return correct / total, correct, total


@register_env("refine_arithmetic")
class RefineArithmetic(Environment):
    """Worked arithmetic with partial credit and retries.

    ``reset`` shows the problem prompt (``347+285=``); after each attempt the score is the fraction of
    leading worked steps that are right (``partial_credit``); an unsolved attempt gets the feedback
    ``\\n<correct>/<total> <prompt>`` and the policy answers again. ``info``: ``attempts``,
    ``solved``, ``scores``.
    """

    Config = RefineConfig

    def reset(self, problem: Problem, seed: int) -> str:
        if not problem.solution and "operands" not in problem.meta:
            raise EnvError("refine_arithmetic: the problem has neither a solution nor operands")
        self._problem, self._done = problem, False
        self.info = {"attempts": 0, "solved": False, "scores": []}
        return problem.prompt

    def step(self, action: str) -> tuple[str, float, bool]:
        if not hasattr(self, "_problem"):
            raise EnvError("refine_arithmetic: step before reset")
        if self._done:
            raise EnvError("refine_arithmetic: step after the episode ended")
        score, correct, total = partial_credit(self._problem, action)
        self.info["attempts"] += 1
        self.info["scores"].append(score)
        self.info["solved"] = self.info["solved"] or score == 1.0
        cap = self.config.max_attempts
        self._done = (score == 1.0 and self.config.stop_when_solved) or (cap > 0 and self.info["attempts"] >= cap)
        obs = self.config.feedback.format(correct=correct, total=total, prompt=self._problem.prompt)
        return obs, score, self._done


@dataclass(frozen=True)
class RefineTaskConfig(ArithmeticConfig):
    retry_demo_frac: float = param(0.0, "TCPO's regime: this fraction of warm-start demonstrations is a two-attempt "
                                        "episode (a worked answer with one wrong step, the environment's default "
                                        "feedback, the right answer), so retries can improve; 0 = single attempts")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.retry_demo_frac <= 1.0:
            raise ValueError(f"refine_arithmetic: retry_demo_frac must lie in [0, 1], got {self.retry_demo_frac}")


def wrong_attempt(gold: str, rng: random.Random) -> tuple[str, int]:
    """(attempt, k): ``gold``'s worked steps with step k (uniform over the steps, ``#answer`` included)
    given a wrong last digit, so ``partial_credit`` finds exactly k leading steps right."""
    steps = gold.split(";")
    k = rng.randrange(len(steps))
    digit = steps[k][-1]
    steps[k] = steps[k][:-1] + str((int(digit) + rng.randint(1, 9)) % 10)
    return ";".join(steps), k


@register("task", "refine_arithmetic")
class RefineArithmeticTask(Arithmetic):
    """Arithmetic problems for multi-turn refinement (the ``refine_arithmetic`` environment).

    Differs from arithmetic:
      * a row sampled as an episode (``multi_turn`` sampler) is scored by its episode reward (partial
        credit of the final or best attempt) with objective ``solved`` (some attempt fully right);
      * a single completion (evaluation) is verified as arithmetic: 1 for the right ``#answer``, and
        ``solved`` is the same verdict;
      * ``retry_demo_frac`` of the warm start's demonstrations (a fixed draw per prompt) are two-attempt
        episodes (:meth:`demonstration_turns`): a wrong attempt (not trained), the feedback (masked), the
        right attempt (trained). Without them retries are out of the warm start's distribution and score
        below first attempts, so turn-level credit never sees a later turn improve.
    Shapes: n/a.
    """

    Config = RefineTaskConfig
    has_step_oracle: ClassVar[bool] = True

    def demonstration_turns(self, problem: Problem) -> list[tuple[str, bool, bool]]:
        """(text, is_policy, trained) turns: the right attempt alone, or for a ``retry_demo_frac`` share of
        prompts a wrong attempt, the environment's feedback and the right attempt."""
        gold = self.demonstration(problem)
        rng = random.Random(f"refine_arithmetic:retry:{problem.prompt}")
        if rng.random() >= self.config.retry_demo_frac:
            return [(gold, True, True)]
        attempt, k = wrong_attempt(gold, rng)
        feedback = RefineConfig().feedback.format(correct=k, total=len(gold.split(";")), prompt=problem.prompt)
        return [(attempt, True, False), (feedback, False, False), (gold, True, True)]

    def verify(self, problem: Problem, completion: str) -> Score:
        ep = episode_of(problem)
        if ep is not None:
            solved = float(any(s == 1.0 for s in ep["scores"]))
            return episode_score(problem, {"solved": solved})
        base = super().verify(problem, completion)
        return Score(base.value, base.parsed, {"objectives": {"solved": base.value}})
