"""Dataset rows of code problems (``task.params.verifier=code``) as Problems with a test spec.

Forms, told apart by their columns:

- HumanEval: ``prompt`` (a function header and docstring), ``test`` (defines ``check(candidate)``),
  ``entry_point``; optional ``canonical_solution`` (the body; the warm-start demonstration).
- MBPP: ``text`` (or the prompt column) and ``test_list`` (assert lines); optional
  ``test_setup_code``, ``test_imports`` and ``code`` (a reference program). The prompt shown is the
  text followed by the tests, as MBPP's own prompts do, so the model learns the function's name.
- ``{prompt, tests: [assert snippets]}`` and ``{prompt, io: [{input, output}]}`` (stdin → stdout);
  optional ``solution``, and ``entry_point``: when present the prompt is code joined to the
  completion, as HumanEval's is.

The spec goes to ``Problem.meta["code"]`` and, as JSON, to ``Problem.answer`` (``rlvr.rewards.code``
reads either), so a code problem is never mistaken for a label-free one.
"""

from __future__ import annotations

import json
from typing import Any

from rlvr.tasks.base import prompt_hash
from rlvr.types import Problem


def code_problem(row: Any, prompt_column: str, solution_column: str, i: int, source: str) -> Problem:
    """Row ``i`` of ``source`` as a code Problem; ValueError says what is wrong with it."""
    if not isinstance(row, dict):
        raise ValueError(f"expected an object with columns, got {type(row).__name__}")
    prompt, spec, solution = _read(row, prompt_column, solution_column)
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"the prompt must be non-empty text, got {prompt!r:.60}")
    meta = {"row": i, "source": source, "code": spec}
    return Problem(prompt, json.dumps(spec), solution, f"dataset:{prompt_hash(prompt):016x}", meta)


def _read(row: dict[str, Any], prompt_column: str, solution_column: str) -> tuple[Any, dict, str | None]:
    if "test" in row and "entry_point" in row:
        return _humaneval(row, prompt_column)
    if "test_list" in row:
        return _mbpp(row, prompt_column)
    if "tests" in row or "io" in row:
        return _plain(row, prompt_column, solution_column)
    raise ValueError(f"not a code row: expected HumanEval columns (prompt, test, entry_point), MBPP's "
                     f"(text, test_list), 'tests' or 'io'; columns there: {sorted(row)}")


def _humaneval(row: dict[str, Any], prompt_column: str) -> tuple[Any, dict, str | None]:
    prompt, test, entry = row.get(prompt_column), row["test"], row["entry_point"]
    if not isinstance(test, str) or "def check" not in test:
        raise ValueError("HumanEval 'test' must be code defining check(candidate)")
    if not isinstance(entry, str) or not entry.isidentifier():
        raise ValueError(f"HumanEval 'entry_point' must be a function name, got {entry!r:.60}")
    spec = {"mode": "assert", "prefix": prompt, "tests": [test], "entry_point": entry, "call_check": True}
    solution = row.get("canonical_solution")
    return prompt, spec, solution if isinstance(solution, str) else None


def _mbpp(row: dict[str, Any], prompt_column: str) -> tuple[Any, dict, str | None]:
    text = row.get("text") if isinstance(row.get("text"), str) else row.get(prompt_column)
    tests = _snippets(row["test_list"], "test_list")
    setup = "\n".join(_snippets(row.get("test_imports") or [], "test_imports"))
    if isinstance(row.get("test_setup_code"), str) and row["test_setup_code"].strip():
        setup = (setup + "\n" + row["test_setup_code"]).strip()
    spec = {"mode": "assert", "prefix": "", "tests": [f"{setup}\n{t}" if setup else t for t in tests]}
    prompt = f"{text}\nYour code should pass these tests:\n" + "\n".join(tests) if isinstance(text, str) else text
    solution = row.get("code")
    return prompt, spec, solution if isinstance(solution, str) else None


def _plain(row: dict[str, Any], prompt_column: str, solution_column: str) -> tuple[Any, dict, str | None]:
    prompt = row.get(prompt_column)
    entry = row.get("entry_point")
    prefix = prompt if isinstance(entry, str) and entry else ""
    if "io" in row:
        pairs = row["io"]
        if not isinstance(pairs, list) or not pairs or not all(
                isinstance(p, dict) and isinstance(p.get("input"), str) and isinstance(p.get("output"), str)
                for p in pairs):
            raise ValueError("'io' must be a non-empty list of {input: text, output: text}")
        spec: dict[str, Any] = {"mode": "io", "prefix": prefix, "io": [{"input": p["input"], "output": p["output"]}
                                                                       for p in pairs]}
    else:
        spec = {"mode": "assert", "prefix": prefix, "tests": _snippets(row["tests"], "tests")}
    if prefix:
        spec["entry_point"] = entry
    solution = row.get(solution_column)
    return prompt, spec, solution if isinstance(solution, str) else None


def _snippets(value: Any, column: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ValueError(f"'{column}' must be a list of code strings, got {value!r:.60}")
    if column != "test_imports" and not value:
        raise ValueError(f"'{column}' is empty: a code problem needs at least one test")
    return list(value)
