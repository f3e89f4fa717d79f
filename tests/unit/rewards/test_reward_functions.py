"""TRL-signature reward functions (algorithm.rewards): config errors, TRL's calling convention (extra
columns, async, None), failures scoring 0 with the reason in-process and in the pool, and how the
objective weights combine with algorithm.reward_weights."""

from __future__ import annotations

import pytest

from rlvr.rewards.functions import columns, objective_weights, reward_functions, score_functions
from rlvr.sandbox.pool import VerifierPool
from rlvr.types import Problem

F = "tests.helpers.reward_fns:"


def _problems(n=3):
    return [Problem(f"q{i}", str(i), meta={"unit": "cm" if i % 2 else "kg", "row": i}) for i in range(n)]


@pytest.mark.parametrize("item,match", [
    ({"weight": 1.0}, "expected"),
    ("tests.helpers.reward_fns:constant", "expected"),
    ({"fn": F + "constant", "scale": 2}, "unknown key"),
    ({"fn": "tests.helpers.reward_fns.constant"}, "pkg.module:func"),
    ({"fn": "tests.no_such_module:f"}, "cannot import"),
    ({"fn": F + "nope"}, "has no attribute"),
    ({"fn": F + "constant", "name": "correct"}, "taken"),
    ({"fn": F + "constant", "weight": float("inf")}, "finite"),
])
def test_bad_reward_entries_name_what_is_wrong(item, match):
    with pytest.raises(ValueError, match=match):
        reward_functions([item])


def test_names_default_to_the_function_and_must_differ():
    fns = reward_functions([{"fn": F + "constant"}, {"fn": F + "constant", "name": "half", "weight": 0.5}])
    assert [(f.name, f.weight) for f in fns] == [("constant", 1.0), ("half", 0.5)]
    with pytest.raises(ValueError, match="taken"):
        reward_functions([{"fn": F + "constant"}, {"fn": F + "brevity", "name": "constant"}])


def test_trl_calling_convention_in_process():
    problems = _problems()
    texts = ["12 cm", "3 cm", "0123456789"]
    fns = reward_functions([{"fn": F + "mentions_unit"}, {"fn": F + "brevity"}, {"fn": F + "no_reward"},
                            {"fn": F + "echo_columns"}])
    values, errors = score_functions(fns, problems, texts, timeout_s=5.0)
    # mentions_unit reads the `unit` column: rows 0 (kg) no, 1 (cm) yes, 2 (kg) no.
    assert [v[0] for v in values] == [0.0, 1.0, 0.0]
    # brevity is async: 1 / (1 + len / 10) for lengths 5, 4, 10.
    assert [v[1] for v in values] == pytest.approx([1 / 1.5, 1 / 1.4, 0.5])
    assert [v[2] for v in values] == [0.0, 0.0, 0.0] and errors == {}  # None: no reward, not an error
    assert [v[3] for v in values] == [3.0] * 3  # answer, unit, row
    assert columns(problems[1]) == {"answer": "1", "unit": "cm", "row": 1}


def test_failing_functions_score_zero_with_reason_in_process():
    fns = reward_functions([{"fn": F + "constant"}, {"fn": F + "explodes"}, {"fn": F + "wrong_length"},
                            {"fn": F + "hangs"}])
    values, errors = score_functions(fns, _problems(2), ["a", "b"], timeout_s=0.3)
    assert values == [[0.5, 0.0, 0.0, 0.0]] * 2  # the working function keeps its value
    for i in (0, 1):
        assert "reward 'explodes': RuntimeError: reward function exploded" in errors[i]
        assert "reward 'wrong_length': returned list" in errors[i]
        assert "reward 'hangs': timeout after 0.3 s" in errors[i]


@pytest.mark.slow  # over ~2 s: not in make test-fast
def test_failing_functions_in_the_pool_cost_only_their_rows():
    fns = reward_functions([{"fn": F + "constant"}, {"fn": F + "hangs"}, {"fn": F + "dies"},
                            {"fn": F + "mentions_unit"}])
    with VerifierPool(2) as pool:
        values, errors = score_functions(fns, _problems(2), ["x cm", "y cm"], timeout_s=0.5, pool=pool)
        assert pool.replaced == 4  # two hung calls killed, two dead workers
    assert values == [[0.5, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 1.0]]
    for i in (0, 1):
        assert "reward 'hangs': timeout after 0.5 s" in errors[i]
        assert "reward 'dies': verifier worker died (exit code 7)" in errors[i]


def test_objective_weights_combine():
    fns = reward_functions([{"fn": F + "mentions_unit", "weight": 2.0}, {"fn": F + "brevity", "weight": 0.5}])
    names = ["correct", "format", "mentions_unit", "brevity"]
    assert objective_weights(names, [], fns) == [1.0, 0.0, 2.0, 0.5]  # default: correct alone + functions
    assert objective_weights(names, [0.5, 0.25], fns) == [0.5, 0.25, 2.0, 0.5]
    assert objective_weights(["correct", "brevity", "mentions_unit"], [0], fns) == [0.0, 0.5, 2.0]  # TRL-like
    with pytest.raises(ValueError, match="reward_weights has 1 entries but the task gives 2"):
        objective_weights(names, [1.0], fns)
    assert objective_weights(["correct"], [], []) is None  # no functions: today's behaviour
    assert objective_weights(["correct", "format"], [1.0, 0.2], []) == [1.0, 0.2]
