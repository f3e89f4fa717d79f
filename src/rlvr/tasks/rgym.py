"""reasoning-gym's procedural datasets as an rlvr task (optional extra: ``pip install 'rlvr[reasoning-gym]'``).

reasoning-gym (Apache-2.0) generates problems offline: an entry has ``question``, ``answer`` and
``metadata``, and its dataset judges a reply with ``score_answer(reply, entry)``. That score is not
binary (near misses earn partial credit: a wrong countdown expression still earns 0.05), so the
reward here is 1 only for a full score unless ``partial_credit`` is set. Entries are indexed
``0..size-1``; row ``i`` of seed ``s`` is row ``i-1`` of seed ``s+1``, so the held-out split is never
taken by seed: a prompt belongs to the test split when its hash falls in ``test_fraction``
(``Task.split_of``). ``import reasoning_gym`` pulls in matplotlib.pyplot, so it happens on first
use, with a non-interactive backend unless one is set.
"""

from __future__ import annotations

import difflib
import math
import os
import random
import re
import warnings
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from rlvr.registry import param, register
from rlvr.tasks.base import Task, TaskConfig, _check_split, prompt_hash
from rlvr.types import Problem, Score

INSTALL_HINT = "pip install 'rlvr[reasoning-gym]'"
ANSWER_FORMATS = ("answer_tag", "boxed", "last_number")
# What the prompt asks for, per answer format (appended after reasoning-gym's question).
INSTRUCTIONS = {
    "answer_tag": "Reason as needed, then write only your final answer between <answer> and </answer>.",
    "boxed": "Reason as needed, then write only your final answer inside \\boxed{}.",
    "last_number": "Reason as needed; the last number you write is taken as your final answer.",
}
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class ReasoningGymConfig(TaskConfig):
    dataset: str = param("leg_counting", "reasoning-gym dataset name (reasoning_gym.factory.DATASETS), or "
                                         "'composite' for a weighted mix given in `config`")
    config: dict = param({}, "the dataset's own options, passed to reasoning-gym as is (e.g. {max_animals: 5}); "
                             "for composite: {datasets: [{name, weight, config}, ...]}")
    size: int = param(1000, "entries generated (indices 0..size-1): the prompt space both splits share")
    seed: int = param(0, "reasoning-gym's generator seed (never the split: that is by prompt hash)")
    answer_format: str = param("answer_tag", "how the reply states its answer, and what the prompt asks for: "
                                             "answer_tag (<answer>...</answer>) | boxed (\\boxed{...}) | "
                                             "last_number (the last number written)")
    partial_credit: bool = param(False, "reward = reasoning-gym's raw score (partial credit for near misses; "
                                        "can be gamed) instead of 1 only for a full score")
    instruction: str = param("", "one more line for every prompt, after the answer-form line (e.g. asking for a "
                                 "stated confidence, 'conf: 0.8', for c3rl); '' = none")
    strip_confidence: bool = param(True, "drop a stated confidence ('conf: 0.8', C3RL's form) before reading the "
                                         "answer, as the dataset task's verifiers do")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"reasoning_gym: answer_format must be one of {ANSWER_FORMATS}, "
                             f"got '{self.answer_format}'")
        if self.size < 1:
            raise ValueError(f"reasoning_gym: size must be >= 1, got {self.size}")
        if not isinstance(self.config, dict):
            raise ValueError(f"reasoning_gym: config must be a mapping of the dataset's options, "
                             f"got {type(self.config).__name__}")


@register("task", "reasoning_gym")
class ReasoningGym(Task):
    """A reasoning-gym procedural dataset (or a weighted composite), scored by its own checker.

    Each entry's question, followed by one line asking for the answer form (``answer_format``),
    is the prompt; ``Problem.answer`` is the gold answer, or None for the datasets that have none
    (boxnet, graph_color, propositional_logic, rubiks_cube, rush_hour), which their checker
    judges all the same. ``verify`` reads the answer from the completion and asks reasoning-gym's
    ``score_answer``; reward 1 only when it scores 1.0 (``partial_credit`` opts into the raw
    score), 0 with ``meta["reason"]`` otherwise. Checks run under the run's verifier time limit
    (``rollout.verify_timeout_s``, ``needs_timeout``). ``problems(n, seed, split)`` walks a seeded
    shuffle of the indices, keeps the split's prompts, and cycles when the split has fewer than n.
    """

    Config = ReasoningGymConfig
    needs_timeout = True
    max_new_tokens = 512

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._data: Any = None  # the reasoning-gym dataset, built on first use (and again in a pool worker)
        self._entries: dict[int, Problem] = {}
        if self.config.partial_credit:
            warnings.warn("reasoning_gym: partial_credit=true rewards near misses with reasoning-gym's raw score; "
                          "it can be gamed: a policy learns to collect it without solving (a wrong countdown "
                          "expression still earns 0.05)", UserWarning, stacklevel=2)
        self.data()  # a missing package, an unknown dataset or a bad option fails here, not mid-run

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_data=None, _entries={})  # a pool worker rebuilds the dataset (warm_up)
        return state

    def data(self) -> Any:
        """The reasoning-gym dataset object (built once)."""
        if self._data is None:
            self._data = build_dataset(self.config.dataset, dict(self.config.config), self.config.size,
                                       self.config.seed)
        return self._data

    def warm_up(self) -> None:
        """Build the dataset before a pool worker's time limits start."""
        self.data()

    def problem(self, index: int) -> Problem:
        """Entry ``index`` as a Problem (generated once)."""
        if index not in self._entries:
            entry = self.data()[index]
            self._entries[index] = entry_problem(entry, index, self.config.answer_format, self.name,
                                                 self.config.instruction)
        return self._entries[index]

    def problems(self, n: int, seed: int, split: str = "train") -> list[Problem]:
        _check_split(split)
        order = list(range(self.config.size))
        random.Random(f"{self.name}:{split}:{seed}").shuffle(order)
        found: list[Problem] = []
        seen: set[str] = set()
        for index in order:
            if len(found) == n:
                break
            p = self.problem(index)
            if p.prompt not in seen and self.split_of(p.prompt) == split:
                seen.add(p.prompt)
                found.append(p)
        if not found:
            raise ValueError(f"reasoning_gym: no {split} problem among {self.config.size} entries of "
                             f"'{self.config.dataset}'; raise size")
        out = [found[i % len(found)] for i in range(n)]  # cycles when the split is smaller than n
        return [Problem(p.prompt, p.answer, p.solution, p.uid, {**p.meta, "split": split}) for p in out]

    def sample(self, rng: random.Random) -> Problem:
        return self.problem(rng.randrange(self.config.size))

    def verify(self, problem: Problem, completion: str) -> Score:
        from rlvr.rewards.answer import strip_confidence
        text = strip_confidence(completion) if self.config.strip_confidence else completion
        reply = extract_reply(text, self.config.answer_format)
        if reply is None:
            return Score(0.0, None, {"reason": f"no answer in the {self.config.answer_format} form"})
        entry = problem.meta.get("rg_entry")
        if entry is None:
            return Score(0.0, reply, {"reason": "the problem carries no reasoning-gym entry (meta['rg_entry'])"})
        try:
            raw = float(self.data().score_answer(reply, entry))
        except Exception as err:  # noqa: BLE001 - a checker that chokes on a reply scores it 0, saying why
            return Score(0.0, reply, {"reason": f"reasoning-gym's checker raised {type(err).__name__}: {err}"})
        strict = override_check(problem.meta.get("rg_dataset"), reply, entry.get("answer"))
        if strict is not None and (raw >= 1.0) != strict:
            return Score(float(strict), reply, {"rg_score": raw, **({} if strict else {"reason": OVERRIDE_REASON})})
        if self.config.partial_credit:
            return Score(raw, reply, {"rg_score": raw})
        if raw >= 1.0:
            return Score(1.0, reply, {"rg_score": raw})
        return Score(0.0, reply, {"rg_score": raw, "reason": f"reasoning-gym scored {raw:g}, not 1"})

    def demonstration(self, problem: Problem) -> str:
        if problem.solution is None:
            raise ValueError(f"reasoning_gym: '{problem.meta.get('rg_dataset')}' has no gold answer for "
                             f"{problem.uid}, so no demonstration")
        return problem.solution


def entry_problem(entry: dict[str, Any], index: int, answer_format: str, task_name: str,
                  instruction: str = "") -> Problem:
    """A reasoning-gym entry as a Problem: the question with the answer-form line (and ``instruction``,
    a line of its own), the gold answer (None when the dataset has none) and, as the solution, that answer
    written in the asked form."""
    prompt = f"{entry['question'].strip()}\n\n{INSTRUCTIONS[answer_format]}"
    if instruction:
        prompt += f"\n{instruction}"
    gold = entry.get("answer")
    answer = None if gold is None else str(gold)
    solution = None if answer is None else wrap_reply(answer, answer_format)
    meta = {"rg_index": index, "rg_dataset": entry.get("metadata", {}).get("source_dataset"), "rg_entry": entry}
    return Problem(prompt, answer, solution, f"{task_name}:{prompt_hash(prompt):016x}", meta)


# Datasets whose checker gives a full score to wrong replies: game_of_life_halting reads any non-empty
# reply as true (so "False" passes when the answer is True), coin_flip pays the length of the common
# prefix over the shorter string ("0" passes for 0.234375) and its tolerance is absolute (1e-4, so "0"
# also passes for 3.05e-05). Their full score is decided here instead (a relative tolerance for coin_flip).
OVERRIDE_REASON = "reasoning-gym's checker passes this reply, but it is not the answer (rlvr.tasks.rgym)"


def override_check(dataset: str | None, reply: str, gold: Any) -> bool | None:
    """Whether ``reply`` is right, for the datasets whose checker is too lenient; None for the others."""
    if dataset == "game_of_life_halting":
        return reply.strip().lower() == str(gold).strip().lower()
    if dataset == "coin_flip":
        want, got = as_fraction(str(gold)), as_fraction(reply)
        return want is not None and got is not None and math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-12)
    return None


def as_fraction(text: str) -> Fraction | None:
    """``text`` as an exact number (commas dropped; '3/8' and '0.375' both work), or None."""
    try:
        return Fraction(text.replace(",", "").strip())
    except (ValueError, ZeroDivisionError):
        return None


def wrap_reply(answer: str, answer_format: str) -> str:
    """``answer`` written the way ``answer_format`` reads it back."""
    if answer_format == "answer_tag":
        return f"<answer>{answer}</answer>"
    if answer_format == "boxed":
        return f"\\boxed{{{answer}}}"
    return answer


def extract_reply(completion: str, answer_format: str) -> str | None:
    """The reply ``answer_format`` reads from a completion: the last <answer>...</answer> span, the
    last \\boxed{...} or the last number (stripped); None when there is none."""
    from rlvr.rewards.answer import last_boxed
    from rlvr.rewards.verifiers import last_number

    if answer_format == "answer_tag":
        spans = _ANSWER_TAG.findall(completion)
        found = spans[-1] if spans else None
    elif answer_format == "boxed":
        found = last_boxed(completion)
    else:
        found = last_number(completion)
    return None if found is None else found.strip()


def import_reasoning_gym() -> Any:
    """``reasoning_gym.factory`` (imported on first use; matplotlib gets the Agg backend unless the
    environment names one), or an error saying how to install it."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    try:
        from reasoning_gym import factory
    except ImportError as err:
        raise ImportError(f"task reasoning_gym needs the reasoning-gym package ({err}); install it with "
                          f"{INSTALL_HINT}") from err
    return factory


def check_name(name: str, known: Any) -> None:
    """A clear error for a dataset name reasoning-gym does not register, with the close ones."""
    if name in known:
        return
    close = difflib.get_close_matches(name, sorted(known), n=5, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(sorted(known))}"
    raise ValueError(f"reasoning_gym: unknown dataset '{name}'{hint}")


def build_dataset(name: str, options: dict[str, Any], size: int, seed: int) -> Any:
    """The reasoning-gym dataset ``name`` with ``options``; a composite's ``datasets`` entries become
    reasoning-gym's DatasetSpec (weight 1 and no options unless given)."""
    factory = import_reasoning_gym()
    check_name(name, factory.DATASETS)
    if name == "composite":
        options["datasets"] = composite_specs(options.get("datasets"), factory.DATASETS)
    try:
        return factory.create_dataset(name, seed=seed, size=size, **options)
    except (TypeError, AssertionError, ValueError) as err:
        raise ValueError(f"reasoning_gym: dataset '{name}' refused config {options!r}: "
                         f"{type(err).__name__}: {err}") from None


def composite_specs(specs: Any, known: Any) -> list[Any]:
    """reasoning-gym DatasetSpecs from ``[{name, weight, config}, ...]``, every name checked."""
    from reasoning_gym.composite import DatasetSpec

    if not isinstance(specs, list) or not specs:
        raise ValueError("reasoning_gym: a composite needs config.datasets, a list of {name, weight, config}")
    out = []
    for spec in specs:
        if not isinstance(spec, dict) or "name" not in spec or set(spec) - {"name", "weight", "config"}:
            raise ValueError(f"reasoning_gym: composite entry {spec!r} must be {{name, weight, config}}")
        check_name(spec["name"], known)
        out.append(DatasetSpec(name=spec["name"], weight=float(spec.get("weight", 1.0)),
                               config=dict(spec.get("config") or {})))
    return out
