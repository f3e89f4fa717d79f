"""rlvr verifiers and tasks as TRL reward functions.

Usage::

    from trl import GRPOTrainer
    from rlvr.integrations.trl import as_trl_reward

    reward = as_trl_reward("math_verify")               # or a Verifier, or a Task such as Arithmetic()
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=ds)   # ds has an "answer" column

TRL calls a reward function with keywords: ``prompts`` and ``completions`` (strings, or lists of
chat messages for conversational data), ``completion_ids``, every dataset column except
``prompt`` (one value per completion, e.g. ``answer``), ``trainer_state``, ``log_extra`` and
``log_metric``; it expects one float per completion. The wrapper scores each completion against
the row's ``answer_column`` with the verifier's own time limit, so a hanging or failing check
gives 0.0; the count of such failures goes to ``log_metric("<name>/verifier_errors", n)`` and
the reasons to the completions table through ``log_extra("<name>_error", reasons)``.
Nothing here imports TRL: the wrapper only follows its calling convention.
"""

from __future__ import annotations

from typing import Any, Callable

from rlvr.sandbox.safe import safe_verify
from rlvr.types import Problem, Score

CALL_KEYS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments")


class TRLReward:
    """A picklable TRL reward function (TRL names it by ``__name__``) backed by an rlvr check."""

    def __init__(self, check: Callable[[Problem, str], Score], name: str, answer_column: str,
                 objective: str | None) -> None:
        self.check, self.__name__ = check, name
        self.answer_column, self.objective = answer_column, objective

    def __repr__(self) -> str:
        return f"TRLReward({self.__name__!r}, answer_column={self.answer_column!r}, objective={self.objective!r})"

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        if self.answer_column not in kwargs:
            columns = sorted(k for k in kwargs if k not in CALL_KEYS)
            raise KeyError(f"{self.__name__}: the dataset has no '{self.answer_column}' column "
                           f"(columns passed by TRL: {columns}); set answer_column=")
        n = len(completions)
        extra = {k: v for k, v in kwargs.items() if k not in CALL_KEYS and isinstance(v, list) and len(v) == n}
        scores = []
        for i in range(n):
            gold = extra[self.answer_column][i]
            problem = Problem(message_text(prompts[i]), None if gold is None else str(gold),
                              meta={k: v[i] for k, v in extra.items()})
            scores.append(self.check(problem, message_text(completions[i])))
        self._log(scores, kwargs)
        if self.objective is None:
            return [float(s.value) for s in scores]
        return [0.0 if s.meta.get("error") else float(s.meta.get("objectives", {}).get(self.objective, 0.0))
                for s in scores]

    def _log(self, scores: list[Score], kwargs: dict[str, Any]) -> None:
        reasons = [str(s.meta.get("error", "")) for s in scores]
        if callable(kwargs.get("log_metric")):
            kwargs["log_metric"](f"{self.__name__}/verifier_errors", float(sum(bool(r) for r in reasons)))
        if callable(kwargs.get("log_extra")) and any(reasons):
            kwargs["log_extra"](f"{self.__name__}_error", reasons)


def as_trl_reward(verifier_or_task: Any, *, answer_column: str = "answer", name: str | None = None,
                  objective: str | None = None, timeout_s: float = 5.0, isolation: str = "thread",
                  **verifier_params: Any) -> TRLReward:
    """A TRL reward function (``prompts, completions, **columns -> list[float]``) from rlvr.

    ``verifier_or_task``: a registered verifier name (``"math_verify"``, built with
    ``verifier_params``), a :class:`rlvr.rewards.verifiers.Verifier` (its own limit applies), a
    task (its ``verify`` runs under ``safe_verify(timeout_s, isolation)`` when the task declares
    ``needs_timeout``) or any ``(Problem, str) -> Score`` callable (always guarded).
    ``objective``: return the task's named objective (``Score.meta["objectives"]``, e.g.
    ``"format"``) instead of the verdict, so each objective can be its own TRL reward function.
    """
    from rlvr.rewards.verifiers import Verifier, build_verifier

    target = build_verifier(verifier_or_task, **verifier_params) if isinstance(verifier_or_task, str) \
        else verifier_or_task
    if verifier_params and not isinstance(verifier_or_task, str):
        raise TypeError(f"as_trl_reward: verifier parameters {sorted(verifier_params)} need a verifier name")
    if isinstance(target, Verifier):
        check: Callable[[Problem, str], Score] = target.score
        label = getattr(target, "registered_name", type(target).__name__)
    elif hasattr(target, "verify"):
        limit = timeout_s if getattr(target, "needs_timeout", True) else None
        check = _Guarded(target.verify, limit, isolation)
        label = getattr(target, "name", type(target).__name__)
    elif callable(target):
        check, label = _Guarded(target, timeout_s, isolation), getattr(target, "__name__", "verifier")
    else:
        raise TypeError(f"as_trl_reward: expected a verifier name, Verifier, task or callable, got "
                        f"{type(verifier_or_task).__name__}")
    default = f"rlvr_{label}" + (f"_{objective}" if objective else "")
    return TRLReward(check, name or default, answer_column, objective)


class _Guarded:
    """``safe_verify(fn, ...)`` as a picklable callable."""

    def __init__(self, fn: Callable[[Problem, str], Score], timeout_s: float | None, isolation: str) -> None:
        self.fn, self.timeout_s, self.isolation = fn, timeout_s, isolation

    def __call__(self, problem: Problem, completion: str) -> Score:
        return safe_verify(self.fn, problem, completion, self.timeout_s, self.isolation)


def message_text(item: Any) -> str:
    """A TRL prompt or completion as text: a string as is; a list of chat messages → the last
    message's ``content`` (TRL's conversational format)."""
    if isinstance(item, str):
        return item
    if isinstance(item, list) and item and isinstance(item[-1], dict):
        content = item[-1].get("content", "")
        if isinstance(content, list):  # multimodal content parts: keep the text parts
            return "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return str(content)
    return str(item)
