"""Code rows of the dataset task (``verifier: code``): HumanEval, MBPP, ``tests`` and ``io`` forms."""

from __future__ import annotations

import json

import pytest

from rlvr.tasks import Dataset
from rlvr.tasks.code_rows import code_problem

HUMANEVAL = {"task_id": "t/0", "prompt": "def inc(x):\n    \"\"\"x + 1\"\"\"\n", "entry_point": "inc",
             "canonical_solution": "    return x + 1\n", "test": "def check(candidate):\n    assert candidate(1) == 2\n"}
MBPP = {"text": "Write a function to double a number.", "test_list": ["assert double(2) == 4", "assert double(0) == 0"],
        "code": "def double(x):\n    return 2 * x", "test_setup_code": "", "test_imports": ["import math"]}
TESTS = {"prompt": "Write triple(x).", "tests": ["assert triple(1) == 3"], "solution": "def triple(x):\n    return 3 * x"}
IO = {"prompt": "Read n, print n squared.", "io": [{"input": "3\n", "output": "9\n"}, {"input": "4\n", "output": "16\n"}],
      "solution": "n = int(input())\nprint(n * n)"}


def test_each_form_becomes_a_spec():
    he = code_problem(HUMANEVAL, "prompt", "solution", 0, "f")
    assert he.meta["code"] == {"mode": "assert", "prefix": HUMANEVAL["prompt"], "tests": [HUMANEVAL["test"]],
                               "entry_point": "inc", "call_check": True}
    assert he.solution == HUMANEVAL["canonical_solution"] and json.loads(he.answer) == he.meta["code"]
    mbpp = code_problem(MBPP, "prompt", "solution", 1, "f")
    assert mbpp.prompt.startswith(MBPP["text"]) and "assert double(2) == 4" in mbpp.prompt
    assert mbpp.meta["code"]["tests"][0] == "import math\nassert double(2) == 4" and mbpp.solution == MBPP["code"]
    plain = code_problem(TESTS, "prompt", "solution", 2, "f")
    assert plain.meta["code"] == {"mode": "assert", "prefix": "", "tests": TESTS["tests"]}
    io = code_problem(IO, "prompt", "solution", 3, "f")
    assert io.meta["code"]["mode"] == "io" and io.meta["code"]["io"][1] == {"input": "4\n", "output": "16\n"}


@pytest.mark.parametrize("row, match", [
    ({"prompt": "x", "answer": "1"}, "not a code row"),
    ({"prompt": "x", "tests": []}, "'tests' is empty"),
    ({"prompt": "x", "io": [{"input": 1, "output": "2"}]}, "'io' must be"),
    ({"prompt": "x", "test": "assert 1", "entry_point": "f"}, "check\\(candidate\\)"),
    ({"prompt": "", "tests": ["assert 1"]}, "prompt must be non-empty"),
])
def test_bad_rows_say_what_is_wrong(row, match):
    with pytest.raises(ValueError, match=match):
        code_problem(row, "prompt", "solution", 0, "f")


def write(tmp_path, rows):
    path = tmp_path / "code.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_dataset_task_verifies_code_rows_with_their_solutions(tmp_path):
    task = Dataset(Dataset.Config(path=write(tmp_path, [HUMANEVAL, MBPP, TESTS, IO]), verifier="code",
                                  test_fraction=0.01))
    problems = task.rows("train") + task.rows("test")
    assert len(problems) == 4
    for p in problems:
        assert task.verify(p, task.demonstration(p)).value == 1.0, p.prompt
        wrong = task.verify(p, "pass")
        assert wrong.value == 0.0 and wrong.meta["reason"], p.prompt


def test_dataset_bad_code_row_names_the_row_or_is_skipped(tmp_path):
    path = write(tmp_path, [TESTS, {"prompt": "y", "tests": "assert 1"}])
    with pytest.raises(ValueError, match=r"line 2: 'tests' must be a list"):
        Dataset(Dataset.Config(path=path, verifier="code")).rows("train")
    task = Dataset(Dataset.Config(path=path, verifier="code", on_bad_row="skip", test_fraction=0.01))
    assert len(task.rows("train") + task.rows("test")) == 1 and task.skipped_rows == 1
