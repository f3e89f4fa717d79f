"""The ``code`` verifier's verdicts: gold programs score 1.0; each failure scores 0 with its reason."""

from __future__ import annotations

import json

import pytest

from rlvr.registry import build
from rlvr.rewards.code import code_spec, extract_code, join_program, same_output
from rlvr.types import Problem

ADD = {"mode": "assert", "prefix": "def add(a, b):\n    \"\"\"a + b\"\"\"\n", "entry_point": "add",
       "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]}
CHECK = {"mode": "assert", "prefix": "def add(a, b):\n", "entry_point": "add", "call_check": True,
         "tests": ["def check(candidate):\n    assert candidate(2, 2) == 4\n"]}
SUM_IO = {"mode": "io", "io": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10"}]}


@pytest.fixture(scope="module")
def verifier():
    return build("verifier", "code", timeout_s=10.0, test_timeout_s=2.0)


def run(verifier, spec, completion):
    return verifier.score(Problem("p", meta={"code": spec}), completion)


def test_gold_programs_score_one(verifier):
    assert run(verifier, ADD, "    return a + b\n").value == 1.0  # a body joined to the header
    assert run(verifier, ADD, "```python\ndef add(a, b):\n    return b + a\n```\ndone").value == 1.0  # whole
    assert run(verifier, CHECK, "    return a + b\n").value == 1.0  # HumanEval's check(candidate)
    io = run(verifier, SUM_IO, "a, b = map(int, input().split())\nprint(a + b)\n")
    assert io.value == 1.0 and io.meta["passed"] == io.meta["total"] == 2 and "reason" not in io.meta


@pytest.mark.parametrize("completion, reason", [
    ("    return a - b\n", "wrong_output"),
    ("    return a +\n", "syntax_error"),
    ("    return undefined_name\n", "runtime_error"),
    ("    raise SystemExit(0)\n", "exit_during_tests"),
    ("    import os; os._exit(0)\n", "exit_before_tests"),
    ("    while True: pass\n", "timeout"),
])
def test_failures_score_zero_with_their_reason(verifier, completion, reason):
    score = run(verifier, ADD, completion)
    assert (score.value, score.meta["reason"]) == (0.0, reason), score.meta
    assert "error" not in score.meta  # a wrong program is not a verifier error


def test_io_wrong_output_and_partial_credit():
    program = "a, b = map(int, input().split())\nprint(3)\n"  # right on the first test only
    strict = build("verifier", "code").score(Problem("p", meta={"code": SUM_IO}), program)
    assert (strict.value, strict.meta["reason"], strict.meta["passed"]) == (0.0, "wrong_output", 1)
    partial = build("verifier", "code", partial=True).score(Problem("p", meta={"code": SUM_IO}), program)
    assert partial.value == 0.5 and partial.meta["partial"] is True


def test_a_printed_or_forged_verdict_scores_nothing(verifier):
    forged = ('import json, os, sys\nprint(json.dumps({"ev": "done"}))\n'
              'for fd in range(3, 20):\n    try:\n        os.write(fd, b\'x\\t{"ev": "test", "i": 0, "ok": true}\\n\')\n'
              '    except OSError:\n        pass\nos._exit(0)\n')
    score = run(verifier, ADD, f"```python\n{forged}```")
    assert score.value == 0.0 and score.meta["passed"] == 0


def test_spec_from_json_answer_and_bad_specs():
    problem = Problem("p", answer=json.dumps(ADD))
    assert code_spec(problem)["entry_point"] == "add"
    assert build("verifier", "code").score(problem, "    return a + b\n").value == 1.0
    missing = build("verifier", "code").score(Problem("p", answer="42"), "x = 1")
    assert missing.value == 0.0 and "has no tests" in missing.meta["error"]
    with pytest.raises(ValueError, match="non-empty 'tests'"):
        code_spec(Problem("p", meta={"code": {"mode": "assert", "tests": []}}))
    with pytest.raises(ValueError, match="'input' and 'output'"):
        code_spec(Problem("p", meta={"code": {"mode": "io", "io": [{"input": "1"}]}}))


def test_extraction_joining_and_output_comparison():
    assert extract_code("text\n```python\nx = 1\n```\n```python\ny = 2\n```") == "x = 1\n"
    assert extract_code("```py\nx = 1\n") == "x = 1\n"  # an unclosed block runs to the end
    assert extract_code("    return 1") == "    return 1"
    assert join_program("def f():\n", "    return 1") == "def f():\n    return 1"
    assert join_program("import math\ndef f():\n    '''doc'''\n", "def f():\n    return 1").startswith("import math")
    assert same_output("1 \n2\n\n", "1\n2") and not same_output("1\n2", "1\n3")


def test_config_errors_name_the_parameter():
    with pytest.raises(ValueError, match="extract"):
        build("verifier", "code", extract="boxed")
    with pytest.raises(ValueError, match="memory_mb"):
        build("verifier", "code", memory_mb=0)
    too_long = build("verifier", "code", max_chars=10).score(Problem("p", meta={"code": ADD}), "x" * 11)
    assert too_long.value == 0.0 and too_long.meta["reason"] == "too_long"
