"""Issue 30, item 8: a reward function that fails on every row is said on the console (once)."""

from __future__ import annotations

from rlvr.rewards import functions as fmod
from rlvr.rewards.functions import reward_functions, score_functions
from rlvr.types import Problem

F = "tests.helpers.reward_fns:"


def test_a_function_failing_on_every_row_warns_once(capsys, monkeypatch):
    monkeypatch.setattr(fmod, "_WARNED", set(), raising=False)
    problems = [Problem(f"{i}?", str(i)) for i in range(3)]
    fns = reward_functions([{"fn": F + "constant"}, {"fn": F + "explodes"}])
    for _ in range(2):
        values, errors = score_functions(fns, problems, ["a", "b", "c"], timeout_s=None)
        assert [v[0] for v in values] == [0.5] * 3 and len(errors) == 3  # the run goes on, as before
    err = capsys.readouterr().err
    assert err.count("WARNING: reward function 'explodes'") == 1, err
    assert "failed on all 3 completions" in err and "RuntimeError: reward function exploded" in err
    assert "'constant'" not in err


def test_a_function_failing_on_some_rows_is_not_reported(capsys, monkeypatch):
    monkeypatch.setattr(fmod, "_WARNED", set(), raising=False)
    fns = reward_functions([{"fn": F + "mentions_unit"}])
    problems = [Problem("1?", "1", meta={"unit": "cm"}), Problem("2?", "2")]  # the second lacks the column
    score_functions(fns, problems, ["x cm", "y"], timeout_s=None)
    assert "WARNING" not in capsys.readouterr().err
