"""The environment protocol: multi-turn episodes whose turns the policy writes as text.

An :class:`Environment` runs one episode at a time::

    obs = env.reset(problem, seed)          # the first observation (the prompt the policy sees)
    obs, score, done = env.step(action)     # after each policy turn: feedback, partial credit, end
    env.info                                # per-episode record (the environment's own diagnostics)
    env.role()                              # who writes the next action ("policy", "planner", ...)

The policy's actions and the environment's observations are joined into one token sequence by the
``multi_turn`` sampler (src/rlvr/rollout/samplers/multi_turn.py); observation tokens are masked
(``Origin.ENV``). ``score`` is the environment's verdict on the episode so far (partial credit in
[0, 1] for refinement tasks, a normalised objective for simulators); the sampler turns the sequence
of scores into the episode reward and per-turn credit.

Contract:
  * ``reset`` must be deterministic given (problem, seed) and ``step`` deterministic given the
    actions so far, so an episode can be replayed (samplers branch episodes by replaying a prefix).
  * ``step`` after ``done`` is an error; the observation returned with ``done=True`` is not shown to
    the policy (it may be a summary for logs).
  * One instance serves one episode at a time; ``reset`` starts over and clears ``info``.

The trainer verifies a batch with the task (``Task.verify(problem, text)``). The sampler therefore
gives each row its own copy of the problem with ``problem.meta["episode"]`` = {"reward", "scores",
"roles", "spans", "info"} (per turn: its score, role and (start, end) in the completion; the record
moves with its row through filters and refills); a task that backs an environment returns
:func:`episode_score` when it is present (the episode's reward), and verifies a single-turn
completion the ordinary way otherwise (evaluation).

Environments are plug-ins of the registry kind ``environment`` (``register_env`` / ``build_env``,
listed by ``rlvr list --kind environment``): a frozen ``Config`` dataclass with ``param`` fields, like
every other plug-in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, TypeVar

from rlvr.plugin import Plugin
from rlvr.registry import RegistryError, get, make_config, names, register
from rlvr.types import Problem, Score

ROLE_POLICY = "policy"  # the default role of every turn
EPISODE_KEY = "episode"  # Problem.meta key under which the multi_turn sampler files a row's episode


class EnvError(RuntimeError):
    """An environment was used out of protocol (step before reset, step after done)."""


class Environment(Plugin, ABC):
    """A multi-turn, text-in / text-out episode with a score after every turn."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.info: dict[str, Any] = {}  # per-episode record, cleared by ``reset``

    @abstractmethod
    def reset(self, problem: Problem, seed: int) -> str:
        """Start an episode on ``problem``; return the first observation (the policy's prompt)."""

    @abstractmethod
    def step(self, action: str) -> tuple[str, float, bool]:
        """Apply the policy's turn; return (next observation, score so far, episode over)."""

    def role(self) -> str:
        """The role of the next action (multi-agent environments override it; e.g. "planner")."""
        return ROLE_POLICY


E = TypeVar("E", bound=type)
KIND = "environment"  # the registry kind (rlvr.registry)


def register_env(name: str) -> Callable[[E], E]:
    """Class decorator: register an :class:`Environment` subclass as environment ``name``."""

    def deco(cls: E) -> E:
        _check_environment(name, cls)
        return register(KIND, name)(cls)

    return deco


def env_names() -> list[str]:
    """The registered environment names, sorted (the registry imports ``rlvr.envs``, the built-ins)."""
    return names(KIND)


def get_env(name: str) -> type:
    """The environment class registered as ``name`` (or imported from ``"pkg.module:Object"``)."""
    cls = get(KIND, name)
    _check_environment(name, cls)
    return cls


def _check_environment(name: str, cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise RegistryError(f"environment '{name}': {cls!r} is not an Environment subclass")


def build_env(name: str, **params: Any) -> Environment:
    """A fresh environment instance with hyperparameters ``params`` (unknown keys are errors)."""
    cls = get_env(name)
    return cls(make_config(cls.Config, params, where=f"environment '{name}'"))


def episode_of(problem: Problem) -> dict[str, Any] | None:
    """The episode record the multi_turn sampler filed on a row's problem, or None."""
    return problem.meta.get(EPISODE_KEY)


def episode_score(problem: Problem, objectives: dict[str, float] | None = None) -> Score | None:
    """A task's ``verify`` result for a row sampled as an episode (its reward), or None when the
    problem carries no episode (a single-turn completion, e.g. during evaluation)."""
    ep = episode_of(problem)
    if ep is None:
        return None
    return Score(float(ep["reward"]), parsed=None, meta={"objectives": dict(objectives or {})})
