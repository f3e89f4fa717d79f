"""The refine_arithmetic environment and task: partial credit by leading correct steps, feedback,
episode end, the task's episode vs single-completion verdicts, and the environment registry."""

from __future__ import annotations

import pytest

from rlvr.envs import EPISODE_KEY, EnvError, build_env, env_names
import random

from rlvr.envs.refine import partial_credit, wrong_attempt
from rlvr.registry import RegistryError, build
from rlvr.sft import IGNORE, demonstration_batch
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


def test_a_wrong_attempt_is_right_up_to_exactly_its_corrupted_step():
    gold = _problem().solution
    seen = set()
    for seed in range(60):
        attempt, k = wrong_attempt(gold, random.Random(seed))
        seen.add(k)
        assert partial_credit(_problem(), attempt) == (pytest.approx(k / 4), k, 4)
    assert seen == {0, 1, 2, 3}  # every step, the #answer segment included, can be the wrong one


def test_retry_demonstrations_replay_the_environment_and_train_only_the_right_attempt(tok):
    task = build("task", "refine_arithmetic", max_digits=3, retry_demo_frac=0.5)
    ps = task.problems(60, seed=2)
    turns = [task.demonstration_turns(p) for p in ps]
    retries = [len(t) == 3 for t in turns]
    assert 15 <= sum(retries) <= 45  # about half, a fixed draw per prompt
    assert turns == [task.demonstration_turns(p) for p in ps]
    batch = demonstration_batch(tok, task, ps)
    eos = tok.eos_token_id
    for i, p in enumerate(ps):
        gold = task.demonstration(p)
        ids, labels = batch["input_ids"][i].tolist(), batch["labels"][i].tolist()
        trained = tok.decode([t for t, y in zip(ids, labels) if y != IGNORE])
        assert trained == f"{gold}<eos>"  # the wrong attempt and the feedback are never trained
        if not retries[i]:
            continue
        (attempt, _, kept), (feedback, policy, _), _ = turns[i]
        env = build_env("refine_arithmetic")
        env.reset(p, seed=0)
        obs, score, done = env.step(attempt)
        assert (feedback, policy, kept) == (obs, False, False) and score < 1.0 and not done
        assert env.step(gold)[1] == 1.0
        assert ids[:sum(batch["attention_mask"][i].tolist())].count(eos) == 2  # each attempt ends in eos


def test_retry_demonstrations_default_to_none_and_reject_a_bad_fraction():
    task = build("task", "refine_arithmetic")
    assert all(len(task.demonstration_turns(p)) == 1 for p in task.problems(20, seed=0))
    with pytest.raises(ValueError, match="retry_demo_frac"):
        build("task", "refine_arithmetic", retry_demo_frac=1.5)
