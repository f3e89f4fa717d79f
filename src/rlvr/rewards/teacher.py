"""First-mistake teachers: who says which reasoning step of a completion is the first wrong one.

A :class:`Teacher` maps ``(problem, completion)`` to the 0-based index of the first wrong step
(``None`` = no mistake found); steps are the completion split on ``step_separator``. Two kinds:

* :class:`OracleTeacher` asks the task's exact step checker (``task.check_steps``; the testbed's
  tasks separate steps by ``;`` and count the ``#answer`` segment as the last step);
* :class:`LLMTeacher` prompts a language model — a local Hugging Face checkpoint (``backend='hf'``)
  or an OpenAI-compatible HTTP server (``backend='http'``, ``POST <base_url>/v1/chat/completions``)
  — through :class:`rlvr.rewards.chat_client.ChatClient`, and parses "first wrong step: N" or "none"
  from its reply. It never raises into the training loop: a timeout, a transport error or an
  unparsable reply falls back to ``None`` (no mistake, which leaves the row's GRPO advantage
  unchanged under cliff's ``mode='group'``) and is counted in ``teacher.stats``.

:func:`first_mistake_tokens` turns the teachers' step indices into token indices (N,) for
``AdvantageInputs.first_mistake``.
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from rlvr.plugin import Plugin
from rlvr.rewards.chat_client import ChatClient, ChatConfig, ChatTimeout
from rlvr.registry import RegistryError, get, make_config, param, register
from rlvr.types import BatchError, Problem

STAT_KEYS = ("calls", "mistake", "no_mistake", "unparsable", "timeout", "error")


@dataclass(frozen=True)
class TeacherConfig:
    step_separator: str = param(";", "the task's step separator (the testbed's tasks use ';')")


class Teacher(Plugin, ABC):
    """Finds the first wrong step of a completion. ``stats`` counts the verdicts (and fallbacks)."""

    Config: ClassVar[type] = TeacherConfig
    needs_task: ClassVar[bool] = False  # built as cls(task, config) (the task is the oracle), else cls(config)

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.stats: dict[str, int] = {k: 0 for k in STAT_KEYS}
        self._lock = threading.Lock()

    @property
    def step_separator(self) -> str:
        """The string the teacher splits completions on (step k starts after the k-th separator)."""
        return self.config.step_separator

    @abstractmethod
    def first_mistake(self, problem: Problem, completion: str) -> int | None:
        """0-based index of the first wrong step; None when no mistake is found."""

    def first_mistakes(self, problems: list[Problem], completions: list[str]) -> list[int | None]:
        """``first_mistake`` for each pair (in order); teachers that can overlap calls override it."""
        return [self.first_mistake(p, c) for p, c in zip(problems, completions)]

    def _count(self, key: str) -> None:
        with self._lock:  # LLM teachers call from worker threads
            self.stats[key] += 1


# --- the exact oracle --------------------------------------------------------------------------

@register("teacher", "oracle")
class OracleTeacher(Teacher):
    """The task's own step checker (``task.check_steps``): an exact first-mistake oracle."""

    needs_task = True

    def __init__(self, task: Any, config: TeacherConfig | None = None) -> None:
        super().__init__(config)
        if not getattr(task, "has_step_oracle", False):
            name = getattr(task, "name", type(task).__name__)
            raise ValueError(f"teacher 'oracle': task '{name}' has no per-step checker "
                             f"(has_step_oracle=False); use teacher 'llm' or a task with check_steps")
        self.task = task

    def first_mistake(self, problem: Problem, completion: str) -> int | None:
        k = self.task.check_steps(problem, completion)
        self._count("calls")
        self._count("no_mistake" if k is None else "mistake")
        return None if k is None else int(k)


# --- an LLM judge ------------------------------------------------------------------------------

DEFAULT_TEMPLATE = (
    "Check the following step-by-step solution.\n"
    "Problem: {problem}\n"
    "{reference}"
    "Solution:\n{steps}\n"
    "Which step is the first one that contains an error? Answer with one line, exactly "
    "'first wrong step: N' (N = the step number) or 'first wrong step: none' if every step is correct."
)


@dataclass(frozen=True)
class LLMTeacherConfig(ChatConfig):
    step_separator: str = param("\n\n", "splits a completion into steps (docs/methods.md §2.3 default '\\n\\n'; "
                                        "the testbed's tasks use ';')")
    sees_gt: bool | None = param(None, "RECONSTRUCTION (docs/methods.md §2.3: teacher_sees_gt, required, no default): "
                                        "true = show the teacher the reference answer (problem.answer); "
                                        "false = judge the steps alone")
    prompt_template: str = param(DEFAULT_TEMPLATE, "the teacher prompt; fields {problem}, {steps} "
                                                   "('Step k: ...' lines, 1-based) and {reference}")

    def __post_init__(self) -> None:
        if self.sees_gt is None:
            raise ValueError("teacher 'llm': sees_gt is required (docs/methods.md §2.3 teacher_sees_gt): true shows the "
                             "teacher the reference answer, false judges the steps alone")
        super().__post_init__()
        self.check_source("teacher 'llm'")
        if not self.step_separator:
            raise ValueError("teacher 'llm': step_separator must be a non-empty string")


@register("teacher", "llm")
class LLMTeacher(Teacher):
    """Asks a language model for the first wrong step; falls back to None (counted) on any failure.

    The prompt numbers the steps from 1 (``Step 1: ...``); the reply's number N becomes index N − 1.
    A reply is parsed by :func:`parse_verdict`. Fallback: timeout, transport error, unparsable
    reply or a step number outside 1..S → ``None`` (no mistake), counted in ``stats`` under
    ``timeout``, ``error`` or ``unparsable``; ``last_error`` keeps the latest reason.
    ``model``/``tokenizer`` may be passed in for ``backend='hf'`` (else loaded from ``model_path``).
    """

    Config = LLMTeacherConfig

    def __init__(self, config: LLMTeacherConfig | None = None, model: Any = None, tokenizer: Any = None) -> None:
        super().__init__(config)
        self.client = ChatClient(self.config, model, tokenizer,
                                 accept=lambda reply: parse_verdict(reply, 10**9)[0] != "unparsable")
        self.last_error = ""

    def prompt(self, problem: Problem, completion: str) -> str:
        steps = completion.split(self.config.step_separator)
        lines = "\n".join(f"Step {k + 1}: {s.strip()}" for k, s in enumerate(steps))
        reference = ""
        if self.config.sees_gt and problem.answer is not None:
            reference = f"Reference answer: {problem.answer}\n"
        return self.config.prompt_template.format(problem=problem.prompt, steps=lines, reference=reference)

    def first_mistake(self, problem: Problem, completion: str) -> int | None:
        self._count("calls")
        num_steps = len(completion.split(self.config.step_separator))
        try:
            reply = self._ask(self.prompt(problem, completion))
        except ChatTimeout as err:
            return self._fallback("timeout", str(err))
        except Exception as err:  # noqa: BLE001 — a teacher failure must not stop training
            return self._fallback("error", f"{type(err).__name__}: {err}")
        verdict, index = parse_verdict(reply, num_steps)
        if verdict == "unparsable":
            return self._fallback("unparsable", f"cannot parse a step in 1..{num_steps} from {reply[:200]!r}")
        self._count(verdict)
        return index

    def first_mistakes(self, problems: list[Problem], completions: list[str]) -> list[int | None]:
        if self.config.backend != "http" or self.config.max_workers == 1:
            return super().first_mistakes(problems, completions)
        with ThreadPoolExecutor(max_workers=self.config.max_workers) as pool:
            return list(pool.map(self.first_mistake, problems, completions))

    def _fallback(self, key: str, reason: str) -> None:
        self._count(key)
        self.last_error = f"{key}: {reason}"
        return None

    def _ask(self, prompt: str) -> str:
        return self.client.ask(prompt)


_VERDICT = re.compile(
    r"first\s+(?:wrong|incorrect|erroneous|mistaken|faulty|bad|error(?:oneous)?)?\s*step"
    r"(?:\s*(?:is|was|:|=|-|number|no\.|#|step))*\s*(\d+|none|n/a|null)\b")
_NONE_WORDS = ("none", "no mistake", "no mistakes", "no error", "no errors", "all correct",
               "all steps are correct", "every step is correct")


def parse_verdict(reply: str, num_steps: int) -> tuple[str, int | None]:
    """A teacher reply → ``('mistake', k)`` (0-based), ``('no_mistake', None)`` or ``('unparsable', None)``.

    Reads the last "first wrong/incorrect step: N | none" phrase (a ``<think>`` block removed,
    markdown ``*`` and backquotes ignored); failing that, a reply that is only a number or only a
    "none"-like phrase. N must lie in 1..num_steps.
    """
    text = re.sub(r"<think>.*?(</think>|$)", " ", reply, flags=re.DOTALL | re.IGNORECASE)
    text = re.sub(r"[*`]", "", text).lower().strip()
    matches = _VERDICT.findall(text)
    if matches:
        answer = matches[-1]
    else:
        answer = text.strip(" \t\n.!'\"")
        if answer.startswith("step "):
            answer = answer[5:].strip()
    if answer in ("none", "n/a", "null") or answer in _NONE_WORDS:
        return "no_mistake", None
    if answer.isdigit() and 1 <= int(answer) <= num_steps:
        return "mistake", int(answer) - 1
    return "unparsable", None


# --- building and token mapping ----------------------------------------------------------------

def build_teacher(name: str, params: dict[str, Any] | None = None, task: Any = None) -> Teacher:
    """A teacher from a config spec ``{name, params}``: a registered name (``rlvr list --kind teacher``:
    oracle, llm) or ``"pkg.module:Object"``; ``task`` is needed by a teacher whose ``needs_task`` is set."""
    cls = get("teacher", name)
    if not (isinstance(cls, type) and issubclass(cls, Teacher)):
        raise RegistryError(f"teacher '{name}': {cls!r} is not a Teacher (rlvr.rewards.teacher)")
    config = make_config(cls.Config, dict(params or {}), where=f"teacher '{name}'")
    if not cls.needs_task:
        return cls(config)
    if task is None:
        raise ValueError(f"teacher '{name}' needs the task (its check_steps is the oracle)")
    return cls(task, config)


def first_mistake_tokens(teacher: Teacher, problems: list[Problem], texts: list[str], tokenizer: Any,
                         completion_ids: Tensor, attention: Tensor,
                         step_separator: str | None = None) -> Tensor:
    """(N,) long: the completion position where the teacher's first wrong step starts; -1 = none.

    ``completion_ids`` (N, T) and ``attention`` (N, T) bool (real tokens). Each attended token is
    decoded on its own (special tokens as ''), giving char offsets; step k starts right after the
    k-th ``step_separator`` (default: the teacher's own) and maps to the first token whose text
    reaches past that char. A step beyond the text (the completion stopped early) maps to the last
    real token — the decision to stop is the mistake. ``texts`` (decoded completions, or [] to
    use the token concatenation) is what the teacher judges.
    """
    n = completion_ids.shape[0]
    if attention.dtype != torch.bool or tuple(attention.shape) != tuple(completion_ids.shape):
        raise BatchError(f"attention must be a bool tensor of shape {tuple(completion_ids.shape)}")
    if len(problems) != n or (texts and len(texts) != n):
        raise BatchError(f"first_mistake_tokens: {len(problems)} problems and {len(texts)} texts for {n} rows")
    sep = step_separator if step_separator is not None else teacher.step_separator
    positions = [attention[i].nonzero().flatten().tolist() for i in range(n)]
    pieces = [tokenizer.batch_decode([[int(completion_ids[i, j])] for j in pos], skip_special_tokens=True)
              for i, pos in enumerate(positions)]
    completions = list(texts) if texts else ["".join(p) for p in pieces]
    steps = teacher.first_mistakes(list(problems), completions)
    out = torch.full((n,), -1, dtype=torch.long)
    for i, k in enumerate(steps):
        if k is not None and positions[i]:
            out[i] = positions[i][_token_of_step(pieces[i], int(k), sep)]
    return out.to(completion_ids.device)


def _token_of_step(pieces: list[str], k: int, sep: str) -> int:
    """Index into ``pieces`` of the token where step ``k`` (0-based) starts; the last one if past the end."""
    text = "".join(pieces)
    start = 0
    for _ in range(k):
        at = text.find(sep, start)
        if at < 0:
            return len(pieces) - 1
        start = at + len(sep)
    end = 0
    for j, piece in enumerate(pieces):
        end += len(piece)
        if end > start:
            return j
    return len(pieces) - 1
