"""The refine_arithmetic environment and task: partial credit by leading correct steps, feedback,
episode end, the task's episode vs single-completion verdicts, and the environment registry."""

from __future__ import annotations

import pytest

from rlvr.envs import EPISODE_KEY, EnvError, build_env, env_names
from rlvr.envs.refine import partial_credit
from rlvr.registry import RegistryError, build
from rlvr.types import Problem

def _problem() -> Problem:
    """347+285: gold steps "7+5=12;4+8+1=13;3+2+1=6;#632", 4 steps (the #answer segment is the last)."""
    return Problem(prompt="347+285=", answer="632", solution="7+5=12;4+8+1=13;3+2+1=6;#632",
                   meta={"operands": [347, 285], "ops": ["+"]})


@pytest.mark.parametrize("attempt, expected", [
    ("7+5=12;4+8+1=13;3+2+1=6;#632", (1.0, 4, 4)),  # exact
    ("7+5=12;4+8+1=13;3+2=5;#532", (0.5, 2, 4)),  # first wrong step is index 2
    ("7+5=11;4+8=12", (0.0, 0, 4)),  # wrong from the start
    ("7+5=12;4+8+1=13;3+2+1=6;#632;junk", (0.75, 3, 4)),  # trailing junk never scores full marks
    ("", (0.0, 0, 4)),
])
def test_partial_credit_counts_leading_correct_steps(attempt, expected):
    score, correct, total = partial_credit(_problem(), attempt)
    assert (score, correct, total) == (pytest.approx(expected[0]), expected[1], expected[2])


def test_episode_feedback_and_end():
    env = build_env("refine_arithmetic")
    assert env.reset(_problem(), seed=0) == "347+285="
    obs, score, done = env.step("7+5=12;4+8=11")
    assert (obs, score, done) == ("\n1/4 347+285=", 0.25, False)
    obs, score, done = env.step("7+5=12;4+8+1=13;3+2+1=6;#632")
    assert score == 1.0 and done
    assert env.info == {"attempts": 2, "solved": True, "scores": [0.25, 1.0]}
    with pytest.raises(EnvError, match="after the episode ended"):
        env.step("x")
    # without stop_when_solved the episode goes on; max_attempts ends it
    env = build_env("refine_arithmetic", stop_when_solved=False, max_attempts=2)
    env.reset(_problem(), 0)
    assert env.step("7+5=12;4+8+1=13;3+2+1=6;#632")[2] is False
    assert env.step("7")[2] is True
    # reset starts over
    env.reset(_problem(), 0)
    assert env.info["attempts"] == 0


def test_task_scores_episodes_by_their_reward_and_single_completions_as_arithmetic():
    task = build("task", "refine_arithmetic")
    single = task.verify(_problem(), "7+5=12;4+8+1=13;3+2+1=6;#632")
    assert single.value == 1.0 and single.meta["objectives"] == {"solved": 1.0}
    assert task.verify(_problem(), "7+5=12;#631").value == 0.0
    row = _problem()
    row.meta[EPISODE_KEY] = {"reward": 0.5, "scores": [0.25, 0.5]}
    ep = task.verify(row, "whatever text")
    assert ep.value == 0.5 and ep.meta["objectives"] == {"solved": 0.0}
    row.meta[EPISODE_KEY] = {"reward": 0.5, "scores": [1.0, 0.5]}  # final reward, but an attempt solved it
    assert task.verify(row, "").meta["objectives"] == {"solved": 1.0}
    # the task draws arithmetic problems and demonstrates them as arithmetic does
    p = task.problems(1, seed=0)[0]
    assert partial_credit(p, task.demonstration(p))[0] == 1.0


def test_registry():
    assert {"refine_arithmetic", "auto_bidding"} <= set(env_names())
    with pytest.raises(RegistryError, match="unknown environment"):
        build_env("refine")
    with pytest.raises(RegistryError, match="unknown parameter"):
        build_env("refine_arithmetic", retries=2)
    with pytest.raises(EnvError, match="before reset"):
        build_env("refine_arithmetic").step("1")
    with pytest.raises(EnvError, match="neither a solution nor operands"):
        build_env("refine_arithmetic").reset(Problem(prompt="1+1="), 0)
