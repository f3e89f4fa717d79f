"""The code_synthesis testbed task: demonstrations pass, memorising the shown pairs does not."""

from __future__ import annotations

import pickle
import re

import pytest

from rlvr.registry import build
from rlvr.sandbox.verify import verify_all


@pytest.fixture(scope="module")
def task():
    return build("task", "code_synthesis", families="lin,sq,mod")


def test_demonstrations_pass_and_equivalent_lines_pass(task):
    problems = task.problems(6, seed=0)
    scores = verify_all(task, problems, [task.demonstration(p) for p in problems], timeout_s=None)
    assert [s.value for s in scores] == [1.0] * 6
    lin = build("task", "code_synthesis").problems(1, seed=1)[0]
    a, b = re.fullmatch(r"return (?:(\d+)\*)?x(?:\+(\d+))?", lin.solution).groups()
    swapped = f"return {b or 0}+x*{a or 1}"
    assert task.verify(lin, swapped).value == 1.0


def test_memorising_the_shown_pairs_fails_on_held_out_inputs(task):
    problem = task.problems(1, seed=2)[0]
    shown = dict(re.findall(r"f\((\d+)\)=(\d+);", problem.prompt))
    table = "{" + ",".join(f"{x}:{y}" for x, y in shown.items()) + "}"
    score = task.verify(problem, f"return {table}[x]")
    assert score.value == 0.0 and score.meta["reason"] == "runtime_error"  # KeyError on an unseen input
    held_out = [int(x) for x in re.findall(r"f\((\d+)\)", " ".join(problem.meta["code"]["tests"]))]
    assert not set(held_out) & {int(x) for x in shown}
    assert task.verify(problem, "return x +").meta["reason"] == "syntax_error"


def test_splits_are_disjoint_and_the_task_travels_to_pool_workers(task):
    train = {p.prompt for p in task.problems(200, seed=0)}
    test = {p.prompt for p in task.problems(20, seed=0, split="test")}
    assert train and test and not train & test
    assert pickle.loads(pickle.dumps(task)).config == task.config


def test_bad_config_names_the_parameter():
    with pytest.raises(ValueError, match="families"):
        build("task", "code_synthesis", families="lin,cubic")
    with pytest.raises(ValueError, match="max_coef"):
        build("task", "code_synthesis", max_coef=1)
