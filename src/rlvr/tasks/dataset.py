"""Problems from a file: JSONL, Parquet, a ``datasets`` folder saved with ``save_to_disk`` or a
``datasets.load_dataset`` name in the local cache, with columns ``prompt`` (a string, or chat
messages: rlvr.tasks.chat) and ``answer`` (optional ``solution``); answers checked with math-verify
by default (option ``verifier``)."""

from __future__ import annotations

import json
import math
import numbers
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.notice import notice
from rlvr.registry import RegistryError, get, param, register
from rlvr.tasks.base import Task, TaskConfig, _check_split, prompt_hash
from rlvr.tasks.chat import prompt_fields
from rlvr.tasks.code_rows import code_problem
from rlvr.tasks.hub import looks_like_hub_name, read_hub
from rlvr.sandbox.safe import safe_verify
from rlvr.types import Problem, Score


@dataclass(frozen=True)
class DatasetConfig(TaskConfig):
    path: str = param("", "JSONL (.jsonl), Parquet (.parquet) file, a datasets save_to_disk folder, or a "
                          "datasets.load_dataset name (e.g. openai/gsm8k) in the local Hugging Face cache")
    subset: str = param("", "configuration (the Hub's 'subset', load_dataset's `name`) of a load_dataset name, "
                            "e.g. 'main' for openai/gsm8k")
    split: str = param("", "split of `path` to train on; '' = 'train' (or the only split)")
    test_path: str = param("", "held-out file; empty = hold out test_fraction of `path` by prompt hash "
                                "(a saved DatasetDict's 'test' split is used when present)")
    prompt_column: str = param("prompt", "column with the prompt: text, or a list of {role, content} chat "
                                         "messages (TRL's conversational format)")
    system_prompt: str = param("", "system message put before every prompt (unless a conversation starts "
                                   "with its own); needs a tokenizer with a chat template")
    chat_template_kwargs: dict = param({}, "extra arguments of the tokenizer's apply_chat_template, e.g. "
                                           "{enable_thinking: false}")
    answer_column: str = param("answer", "column with the gold answer; '' = a label-free dataset (no answers)")
    unlabelled_rows: str = param("error", "a row whose answer is null or absent: 'error' (naming file and line: a "
                                          "lost label would train and test as label-free) or 'label_free' (partly "
                                          "labelled data, e.g. DE-Venus's mixed supervision)")
    solution_column: str = param("solution", "optional column with a worked solution (used by warm_start)")
    timeout_s: float = param(5.0, "time limit of one answer check, in seconds")
    verifier: str = param("math_verify", "answer checker (rlvr list verifier): math_verify | numeric | exact | "
                                         "code (rows with tests: HumanEval, MBPP, tests, io; docs/code.md)")
    meta_columns: list = param([], "extra columns copied into each Problem.meta (e.g. ref_accuracy for c3rl); "
                                   "a missing one is an error")
    on_bad_row: str = param("error", "a row missing a column, with an answer that is not a string or number, or "
                                     "with a prompt too long for the model's context: 'error' (naming the row) "
                                     "or 'skip' (dropped and counted)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.on_bad_row not in ("error", "skip"):
            raise ValueError(f"on_bad_row must be 'error' or 'skip', got {self.on_bad_row!r}")
        if self.unlabelled_rows not in ("error", "label_free"):
            raise ValueError(f"unlabelled_rows must be 'error' or 'label_free', got {self.unlabelled_rows!r}")


@register("task", "dataset")
class Dataset(Task):
    """Rows of a local dataset, verified with math-verify (symbolic equivalence of answers).

    Splits: with ``test_path`` (or a saved DatasetDict holding 'test') the held-out rows come from
    there; otherwise a row is held out when its prompt hash falls in ``test_fraction``.
    ``problems(n, seed)`` returns a seeded shuffle of the split's rows, cycling when n exceeds
    them. A prompt cell may be chat messages (TRL's conversational format); those, or a
    ``system_prompt``, travel in ``Problem.meta["messages"]`` and are rendered by
    ``rlvr.models.render_prompt`` (rlvr.tasks.chat). Answers are checked by the verifier named in
    ``verifier`` (default ``math_verify``), which enforces ``timeout_s`` itself from any thread
    (rlvr.rewards.verifiers). A problem without a gold answer (label-free) scores 0 with
    ``Score.parsed`` still read by that verifier's rules (and ``meta["no_gold"]``), so consensus
    rewards (ttrl, om_grpo) can vote on it.
    """

    Config = DatasetConfig
    needs_timeout = True
    max_new_tokens = 512

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        if not self.config.path:
            raise ValueError("dataset task: set `path` to a JSONL, Parquet file or a save_to_disk folder")
        self._rows: dict[str, list[Problem]] | None = None
        self._verifier: Any = None
        self.skipped_rows = 0  # rows dropped under on_bad_row: skip

    def rows(self, split: str) -> list[Problem]:
        """All problems of a split (loaded once)."""
        _check_split(split)
        if self._rows is None:
            self._rows = self._load()
        return self._rows[split]

    def problems(self, n: int, seed: int, split: str = "train") -> list[Problem]:
        rows = self.rows(split)
        if not rows:
            raise ValueError(f"dataset task: the {split} split of {self.config.path} is empty")
        rng = random.Random(f"dataset:{split}:{seed}")
        out: list[Problem] = []
        while len(out) < n:
            order = rows[:]
            rng.shuffle(order)
            out += order[: n - len(out)]
        return [Problem(p.prompt, p.answer, p.solution, p.uid, dict(p.meta)) for p in out]

    def sample(self, rng: random.Random) -> Problem:
        return rng.choice(self.rows("train"))

    def verify(self, problem: Problem, completion: str) -> Score:
        episode = problem.meta.get("episode")  # a multi_turn row (e.g. python_tool): the episode's reward
        if isinstance(episode, dict) and "reward" in episode:
            return Score(float(episode["reward"]), None, {"objectives": {}})
        if self._verifier is None:
            from rlvr.registry import build

            self._verifier = build("verifier", self.config.verifier, timeout_s=self.config.timeout_s)
        if problem.answer is None:  # label-free: no verdict, but the answer is still read
            return safe_verify(lambda _, text: Score(0.0, parse_only(self._verifier, text), {"no_gold": True}),
                               problem, completion, self._verifier.config.timeout_s, self._verifier.config.isolation)
        return self._verifier.score(problem, completion)

    def warm_up(self) -> None:
        """Build the verifier and run it once (a verifier pool worker calls this on loading the task,
        before its calls' time limits start: math-verify builds its grammar on first use)."""
        self.verify(Problem("", "0"), "0")

    def demonstration(self, problem: Problem) -> str:
        if not problem.solution:
            raise ValueError(f"dataset task: problem {problem.uid} has no solution; add a "
                             f"'{self.config.solution_column}' column to {self.config.path}")
        return problem.solution

    def _load(self) -> dict[str, list[Problem]]:
        cfg = self.config
        tables = read_table(cfg.path, cfg.subset)
        main_split = train_split(tables, cfg.split, cfg.path)
        train = self._problems_from(tables[main_split], cfg.path)
        if cfg.test_path:
            test_tables = read_table(cfg.test_path, cfg.subset)
            test = self._problems_from(test_tables.get("test", next(iter(test_tables.values()))), cfg.test_path)
        elif "test" in tables and main_split != "test" and ("train" in tables or cfg.split):
            test = self._problems_from(tables["test"], cfg.path)
        else:
            test = [p for p in train if self.split_of(p.prompt) == "test"]
            train = [p for p in train if self.split_of(p.prompt) == "train"]
        return {"train": train, "test": test}

    def drop_rows(self, uids: set[str], reason: str) -> None:
        """Drop the problems ``uids`` from both splits (``on_bad_row: skip``) or raise naming ``reason``."""
        if self.config.on_bad_row != "skip":
            raise ValueError(f"dataset task: {self.config.path}: {reason}; fix them or set "
                             f"task.params.on_bad_row=skip")
        self.rows("train")
        assert self._rows is not None
        before = sum(map(len, self._rows.values()))
        self._rows = {split: [p for p in rows if p.uid not in uids] for split, rows in self._rows.items()}
        self.skipped_rows += before - sum(map(len, self._rows.values()))
        notice(f"dataset task: skipped {reason}")

    def _problems_from(self, rows: list[dict[str, Any]], source: str) -> list[Problem]:
        cfg = self.config
        first = rows[0] if rows else {}
        columns = set(first) if isinstance(first, dict) else set()
        code = _reads_test_suites(cfg.verifier)  # test suites instead of an answer column (rlvr.tasks.code_rows)
        for col in () if code else (cfg.prompt_column, cfg.answer_column, *cfg.meta_columns):
            if col and col not in columns:
                hint = "; for a dataset without answers set answer_column: ''" if col == cfg.answer_column else ""
                raise ValueError(f"dataset task: column '{col}' is missing in {source} "
                                 f"(columns: {sorted(columns) or 'none, the file is empty'}){hint}")
        out, bad = [], []
        for i, row in enumerate(rows):
            try:
                out.append(self._problem(row, i, source, columns))
            except BadRow as err:
                bad.append(f"{row_label(rows, i)}: {err}")
        unique, conflicts = drop_conflicts(out, rows)
        dropped, out = len(bad) + len(out) - len(unique), unique  # rows: every row of a conflict goes
        bad += conflicts
        if bad:
            listed = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
            if cfg.on_bad_row != "skip":
                raise ValueError(f"dataset task: {source}: {len(bad)} bad row(s) ({listed}); fix them or set "
                                 f"task.params.on_bad_row=skip")
            self.skipped_rows += dropped
            notice(f"dataset task: skipped {dropped} bad row(s) of {source} ({listed})")
        return out

    def _problem(self, row: Any, i: int, source: str, columns: set[str]) -> Problem:
        """One row as a Problem; ``BadRow`` says what is wrong with it. A row without the answer column
        is label-free (partly labelled data), unless it has a column the first row lacks (a misspelling)."""
        cfg = self.config
        if _reads_test_suites(cfg.verifier):  # HumanEval / MBPP / tests / io rows
            try:
                return code_problem(row, cfg.prompt_column, cfg.solution_column, i, source)
            except ValueError as err:
                raise BadRow(str(err)) from None
        if not isinstance(row, dict):
            raise BadRow(f"expected an object with columns, got {type(row).__name__}")
        unknown = sorted(set(row) - columns)
        missing = [c for c in (cfg.prompt_column, *cfg.meta_columns) if c not in row]
        if cfg.answer_column and cfg.answer_column not in row and unknown:
            missing.append(cfg.answer_column)
        if missing:
            raise BadRow(f"column(s) {missing} missing (columns there: {sorted(row)}"
                         + (f"; not in the first row: {unknown})" if unknown else ")"))
        try:
            prompt, identity, chat = self._prompt(row[cfg.prompt_column], "the prompt")
        except ValueError as err:  # a malformed conversation: named with the file and line like any bad row
            raise BadRow(str(err)) from None
        solution = row.get(cfg.solution_column)
        uid = f"dataset:{prompt_hash(identity):016x}"
        answer = answer_text(row.get(cfg.answer_column)) if cfg.answer_column else None
        if answer is None and cfg.answer_column and cfg.unlabelled_rows != "label_free":
            raise BadRow(f"no answer ('{cfg.answer_column}' is {'null' if cfg.answer_column in row else 'absent'}); "
                         f"for a label-free dataset set answer_column: '', for partly labelled data "
                         f"unlabelled_rows: label_free")
        meta = {"row": i, "source": source, **chat, **{col: row[col] for col in cfg.meta_columns}}
        return Problem(prompt, answer, None if solution is None else str(solution), uid, meta)

    def _prompt(self, value: Any, where: str) -> tuple[str, str, dict[str, Any]]:
        """(display text, identity text, meta entries) of a prompt cell (rlvr.tasks.chat); any cell
        that is not a list of messages is read as text (``str``), as before."""
        cfg = self.config
        if not isinstance(value, (str, list, tuple)):
            value = str(value)
        return prompt_fields(value, system_prompt=cfg.system_prompt, template_kwargs=cfg.chat_template_kwargs,
                             where=where)


class BadRow(ValueError):
    """A dataset row that cannot become a problem (the message says why)."""


class Rows(list):
    """A file's rows with the line each came from (``lines[i]``, 1-based; JSONL), for error messages."""

    lines: list[int] = []


def row_label(rows: list, i: int) -> str:
    """How an error names row ``i``: its line in a JSONL file, else its 1-based row number."""
    lines = getattr(rows, "lines", None)
    return f"line {lines[i]}" if lines else f"row {i + 1}"


def drop_conflicts(problems: list[Problem], rows: list) -> tuple[list[Problem], list[str]]:
    """``problems`` without those whose prompt another row repeats with a different answer (one uid
    cannot carry two gold answers), and one message per conflict naming both rows."""
    first: dict[str, Problem] = {}
    conflicts, dropped = [], set()
    for p in problems:
        seen = first.setdefault(p.uid, p)
        if seen is not p and seen.answer != p.answer:
            conflicts.append(f"{row_label(rows, seen.meta['row'])} and {row_label(rows, p.meta['row'])}: the same "
                             f"prompt with different answers {seen.answer!r:.40} and {p.answer!r:.40}")
            dropped.add(p.uid)
    return [p for p in problems if p.uid not in dropped], conflicts


def answer_text(value: Any) -> str | None:
    """A gold answer as text: a string as is, a number once normalised (58.0 → "58", 0.5 → "0.5"),
    None for a label-free row; anything else (a list, dict, bool, NaN) is a ``BadRow``."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
        value = float(value)
        return str(int(value)) if value.is_integer() else repr(value)
    raise BadRow(f"answer {value!r:.60} is a {type(value).__name__}; an answer must be a string or a finite number")


def train_split(tables: dict[str, list[dict[str, Any]]], split: str, path: str) -> str:
    """The split to train on: ``split`` when given (it must exist), else 'train' or the first one."""
    if split and split not in tables:
        raise ValueError(f"dataset task: {path} has no split '{split}'; splits: {', '.join(tables)}")
    return split or ("train" if "train" in tables else next(iter(tables)))


def read_table(path: str, name: str = "") -> dict[str, list[dict[str, Any]]]:
    """Rows of a JSONL / Parquet file ({"train": rows}), of a save_to_disk folder (one entry per
    split of a DatasetDict, else {"train": rows}) or of a cached ``load_dataset`` name (configuration
    ``name``; rlvr.tasks.hub)."""
    p = Path(path)
    if not p.exists():
        if looks_like_hub_name(path):
            return read_hub(path, name)
        raise FileNotFoundError(f"dataset file not found: {p}")
    if p.is_dir():
        from datasets import Dataset as HFDataset, DatasetDict, load_from_disk

        data = load_from_disk(str(p))
        if isinstance(data, DatasetDict):
            return {name: data[name].to_list() for name in data}
        assert isinstance(data, HFDataset)
        return {"train": data.to_list()}
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        return {"train": pq.read_table(str(p)).to_pylist()}
    if p.suffix in (".jsonl", ".json"):
        return {"train": read_jsonl(p)}
    raise ValueError(f"dataset file {p}: unsupported format '{p.suffix}'; use .jsonl, .parquet or a save_to_disk folder")


def read_jsonl(p: Path) -> Rows:
    """The objects of a JSONL file, one a line (blank lines skipped), each with its line number; a line
    that is not UTF-8 or not JSON is an error naming the file and the line."""
    rows = Rows()
    rows.lines = []
    for n, raw in enumerate(p.read_bytes().splitlines(), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{p}: line {n} is not UTF-8 text ({err.reason} at byte {err.start} of the line); "
                             f"re-save the file as UTF-8") from None
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{p}: line {n} is not valid JSON ({err.msg})") from None
            rows.lines.append(n)
    return rows


def _reads_test_suites(verifier: str) -> bool:
    """Whether the verifier named ``verifier`` takes a test suite as its gold (class trait
    ``gold_is_test_suite``); an unknown name is left for building the verifier to report."""
    try:
        return bool(getattr(get("verifier", verifier), "gold_is_test_suite", False))
    except RegistryError:
        return False


def parse_only(verifier: Any, completion: str) -> str | None:
    """The answer ``verifier`` would compare, in a canonical form, with no gold answer to compare it to:
    math-verify's parse (as its ``Score.parsed``), the number for ``numeric`` (``632.0`` → ``632``),
    the normalised extracted text otherwise."""
    from rlvr.rewards.answer import normalise, strip_confidence
    from rlvr.rewards.verifiers import MathVerifyVerifier, NumericVerifier, last_number, nesting_depth, to_number

    cfg = verifier.config
    if len(completion) > cfg.max_chars or nesting_depth(completion) > cfg.max_nesting:
        return None
    region = verifier.answer(strip_confidence(completion) if cfg.strip_confidence else completion)
    if region is None:
        return None
    if isinstance(verifier, MathVerifyVerifier):
        from math_verify import parse
        pred = parse(region, parsing_timeout=None)
        return str(pred[-1]) if pred else None
    if isinstance(verifier, NumericVerifier):
        found = last_number(region)
        value = to_number(found) if found is not None else None
        if value is None or value != value or value in (float("inf"), float("-inf")):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    return normalise(region) or None
