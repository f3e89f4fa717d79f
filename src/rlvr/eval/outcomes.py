"""Per-problem outcomes of a held-out evaluation: saved next to a run's results so analyses can pair
two runs problem by problem, not only seed by seed.

One row per problem, in evaluation order::

    {"index": 0, "id": "3f2a9c1b7e", "subset": null, "greedy": 1.0, "correct": 3, "k": 4, "maj": 1.0}

``greedy`` is the greedy completion's reward (1.0 / 0.0 for a right / wrong answer), ``correct`` how many
of the ``k`` samples were verified right (pass@j of the problem follows: ``pass_at_k(k, correct, j)``),
``maj`` whether the majority vote was right; without sampling (k = 0) only ``greedy`` is there. ``id`` is
the problem's ``uid`` or, without one, a digest of its prompt and answer, so two runs can check they
were scored on the same problems. ``RUN/eval_outcomes.jsonl`` holds the rows of the evaluation before
RL (``"phase": "before"``) and after it (``"phase": "after"``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from rlvr.files import write_text_atomic

from rlvr.types import Problem, Score

OUTCOMES = "eval_outcomes.jsonl"  # in the run folder


def problem_id(problem: Problem) -> str:
    """The problem's ``uid``, else the first 10 hex digits of sha256(prompt, answer)."""
    if problem.uid:
        return str(problem.uid)
    text = json.dumps([problem.prompt, problem.answer])
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def outcome_rows(problems: list[Problem], greedy: list[Score], correct: list[int] | None, k: int,
                 maj: list[float] | None) -> list[dict[str, Any]]:
    """One row per problem (see the module docstring); ``correct`` / ``maj`` None without sampling."""
    rows = []
    for i, (problem, score) in enumerate(zip(problems, greedy)):
        row: dict[str, Any] = {"index": i, "id": problem_id(problem), "subset": problem.meta.get("subset"),
                               "greedy": float(score.value)}
        if correct is not None:
            row.update(correct=int(correct[i]), k=k, maj=float(maj[i]) if maj is not None else None)
        rows.append(row)
    return rows


def write_outcomes(run_dir: str | Path, before: list[dict] | None, after: list[dict]) -> Path:
    """RUN/eval_outcomes.jsonl with the rows before RL (when known) then after it, written atomically."""
    path = Path(run_dir) / OUTCOMES
    lines = [json.dumps({"phase": phase, **row}) for phase, rows in (("before", before or []), ("after", after))
             for row in rows]
    return write_text_atomic(path, "\n".join(lines) + "\n")


def read_outcomes(run_dir: str | Path, phase: str = "after") -> list[dict[str, Any]] | None:
    """The rows of ``phase`` in RUN/eval_outcomes.jsonl (None when the run saved none)."""
    path = Path(run_dir) / OUTCOMES
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if k != "phase"} for r in rows if r.get("phase") == phase]
