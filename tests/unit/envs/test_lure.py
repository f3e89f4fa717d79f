"""LURE (docs/methods.md §2.7): capture-frontier reward, monotone progress credit, capture-anchored returns with
joint normalisation, the round anchor, the pursuit environments and the warm-start layout."""

from __future__ import annotations

import random

import pytest
import torch

from rlvr.envs.base import build_env
from rlvr.envs.lure import LureArithmetic, LureCountdown
from rlvr.envs.lure_credit import (
    anchor_due, capture_returns, evader_reward, joint_normalise, progress_credit, pursuer_advantages,
)
from rlvr.envs.lure_demos import episode_batch, evader_demo, parse_level, pursuit_demo
from rlvr.models import build_char_tokenizer
from rlvr.ops import kl_estimate
from rlvr.registry import RegistryError, build
from rlvr.sft import IGNORE
from rlvr.types import AdvantageInputs, Problem


# --- evader: capture-frontier reward ------------------------------------------------------------

def test_evader_reward_peaks_at_half_captures_and_vanishes_at_the_ends():
    c = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0])
    # triangle 1 - |2c - 1|: 0, 1 - 0.5, 1, 1 - 0.5, 0
    assert torch.allclose(evader_reward(c, "triangle"), torch.tensor([0.0, 0.5, 1.0, 0.5, 0.0]))
    # quadratic 4c(1 - c): 0, 4·0.25·0.75 = 0.75, 1, 0.75, 0
    assert torch.allclose(evader_reward(c, "quadratic"), torch.tensor([0.0, 0.75, 1.0, 0.75, 0.0]))
    grid = torch.linspace(0, 1, 101)  # includes 0.5 exactly at index 50
    for form in ("triangle", "quadratic"):
        r = evader_reward(grid, form)
        assert int(r.argmax()) == 50 and r[0] == 0 and r[-1] == 0
    with pytest.raises(ValueError):
        evader_reward(torch.tensor([1.5]))
    with pytest.raises(ValueError):
        evader_reward(c, "gaussian")


# --- pursuer: progress credit, capture-anchored returns, joint normalisation -------------------

def test_progress_credit_is_nonnegative_and_sums_to_the_best_progress():
    v = [0.2, 0.1, 0.5, 0.5, 0.9]
    # p_s = max(0, v_s - best before): 0.2, 0 (0.1 < 0.2), 0.3, 0 (no new best), 0.4 -> sum 0.9 = max v - v_0
    p = progress_credit(v)
    assert p == pytest.approx([0.2, 0.0, 0.3, 0.0, 0.4])
    assert all(x >= 0 for x in p) and sum(p) == pytest.approx(max(v) - 0.0)
    # from v_0 = 0.3: 0, 0, 0.2, 0, 0.4 -> sum 0.6 = 0.9 - 0.3
    p0 = progress_credit(v, initial=0.3)
    assert p0 == pytest.approx([0.0, 0.0, 0.2, 0.0, 0.4]) and sum(p0) == pytest.approx(0.6)
    # a trajectory that never beats v_0 earns nothing
    assert progress_credit([0.1, 0.0], initial=0.5) == [0.0, 0.0]


def test_capture_anchored_returns():
    # p = [0.2, 0, 0.3], C = 1: g_3 = 0.3 + 1, g_2 = 0 + 1.3, g_1 = 0.2 + 1.3
    assert capture_returns([0.2, 0.0, 0.3], 1.0) == pytest.approx([1.5, 1.3, 1.3])
    assert capture_returns([0.2, 0.0, 0.3], 0.0) == pytest.approx([0.5, 0.3, 0.3])


def test_joint_normalisation_over_every_step_of_the_group():
    # one group, steps {1.5, 1.3} and {0.0}: mean 2.8/3 = 0.93333; deviations 0.56667, 0.36667, -0.93333;
    # squares sum 0.32111 + 0.13444 + 0.87111 = 1.32667, / (3 - 1) = 0.66333 -> std 0.81445;
    # A = 0.69577, 0.45021, -1.14597. A second group {2.0} alone: mean 0, std 1 -> A = 2.0.
    out = joint_normalise([[1.5, 1.3], [0.0], [2.0]], [7, 7, 9], ddof=1, eps=0.0)
    assert out[0] == pytest.approx([0.69577, 0.45021], abs=1e-4)
    assert out[1] == pytest.approx([-1.14597], abs=1e-4)
    assert out[2] == pytest.approx([2.0])


def test_one_step_without_progress_reduces_to_grpo_on_capture():
    captures = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    groups = [0, 0, 0, 1, 1, 1]
    mask = torch.ones(6, 3, dtype=torch.bool)
    adv, credits = pursuer_advantages([[0.0]] * 6, captures, [[(0, 3)]] * 6, groups, mask, ddof=1, eps=1e-6)
    grpo = build("advantage", "grpo", ddof=1, eps=1e-6)(AdvantageInputs(
        rewards=torch.tensor(captures).unsqueeze(1), mask=mask, group_ids=torch.tensor(groups)))
    assert torch.allclose(adv, grpo.advantages, atol=1e-5)
    assert credits == [[0.0]] * 6


def test_pursuer_advantages_follow_turn_spans_and_skip_environment_tokens():
    # Row 0: turns at [0,2) and [3,5) (token 2 is an environment token), v = [0, 1], captured.
    #   p = [0, 1], g = [0 + 1 + 1, 1 + 1] = [2, 2]. Row 1: one turn [0,2), v = [0], not captured: g = [0].
    # Group steps {2, 2, 0}: mean 4/3, std sqrt(((2/3)^2 * 2 + (4/3)^2) / 2) = sqrt(4/3) = 1.1547
    # -> A = 0.57735 for row 0's turns, -1.1547 for row 1's turn.
    mask = torch.tensor([[True, True, False, True, True], [True, True, False, False, False]])
    adv, _ = pursuer_advantages([[0.0, 1.0], [0.0]], [1.0, 0.0], [[(0, 2), (3, 5)], [(0, 2)]], [0, 0], mask,
                                ddof=1, eps=0.0)
    expected = torch.tensor([[0.57735, 0.57735, 0.0, 0.57735, 0.57735], [-1.1547, -1.1547, 0.0, 0.0, 0.0]])
    assert torch.allclose(adv, expected, atol=1e-4)


# --- round-anchored KL --------------------------------------------------------------------------

def test_anchor_is_due_at_the_first_step_of_every_round():
    assert [anchor_due(s, 3) for s in range(7)] == [True, False, False, True, False, False, True]
    with pytest.raises(ValueError):
        anchor_due(0, 0)


def test_kl_to_the_round_anchor_is_zero_at_the_anchor():
    # At the round's first step the reference is a copy of the policy: identical log-probs, k3 = 0.
    from rlvr.models import build_tiny_model
    from rlvr.rollout import sequence_logprobs
    tok = build_char_tokenizer()
    policy = build_tiny_model(tok, hidden=16, layers=1, heads=2, seed=0)
    anchor = build_tiny_model(tok, hidden=16, layers=1, heads=2, seed=1)
    anchor.load_state_dict(policy.state_dict())  # what LURETrainer does at anchor_due
    ids = torch.tensor([[1, 20, 21], [1, 22, 23]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    comp = torch.tensor([[30, 31], [32, 33]])
    cmask = torch.ones_like(comp, dtype=torch.bool)
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy, ids, mask, comp, cmask)
        ref, _ = sequence_logprobs(anchor, ids, mask, comp, cmask)
        assert torch.equal(kl_estimate(logp, ref, "k3"), torch.zeros_like(logp))
        for p in policy.parameters():
            p.add_(0.05)
        moved, _ = sequence_logprobs(policy, ids, mask, comp, cmask)
    assert (kl_estimate(moved, ref, "k3") > 0).any()  # away from the anchor the penalty is not zero


# --- environments --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["lure_arithmetic", "lure_countdown"])
def test_a_perfect_episode_is_captured_with_monotone_progress(name):
    env = build_env(name)
    for level in range(1, env.config.levels + 1):
        problem = env.task_at(level, random.Random(level))
        assert env.reset(problem, 0) == problem.prompt and env.role() == "planner"
        scores, done = [], False
        for action in env.demonstration_turns(problem):
            _, score, done = env.step(action)
            scores.append(score)
        assert done and env.info["captured"] and env.info["plan_ok"]
        assert scores[0] == 0.0 and scores[-1] == 1.0 and scores == sorted(scores)
        assert env.role() == "executor"


def test_difficulty_axes():
    arith, count = LureArithmetic(), LureCountdown()
    for level in (1, 2, 3):
        p = arith.task_at(level, random.Random(0))
        assert all(len(str(x)) == level for x in p.meta["operands"]) and p.meta["level"] == level
        q = count.task_at(level, random.Random(0))
        assert len(q.meta["numbers"]) == level + 1 and q.meta["level"] == level


def test_a_wrong_step_ends_the_episode_uncaptured():
    env = build_env("lure_arithmetic")
    problem = Problem(prompt="347+285=", meta={"operands": [347, 285], "ops": ["+"], "level": 3})
    env.reset(problem, 0)
    assert env.step("7+5,4+8,3+2") == ("\n", 0.0, False) and env.info["plan_ok"]
    # gold steps: 7+5=12; 4+8+1=13; 3+2+1=6; #632 (4 segments): one right step -> v = 1/4
    assert env.step("7+5=12") == (";", 0.25, False)
    _, score, done = env.step("4+8=12")  # wrong: the carry is missing
    assert done and score == 0.25 and not env.info["captured"]
    with pytest.raises(Exception):
        env.step("3+2+1=6")


def test_countdown_accepts_any_valid_solution():
    env = build_env("lure_countdown")
    problem = Problem(prompt="3,5,7,2>23:", meta={"numbers": [3, 5, 7, 2], "target": 23, "level": 3},
                      solution="3*7=21;21+2=23;#23")
    env.reset(problem, 0)
    env.step("3,7,2")
    # 5*3=15 keeps 23 reachable (15*2-7); 15+7=22 leaves {22, 2}: 24, 20, 44 -> wrong at step 2.
    # progress = 1 right step / 3 gold segments (3*7=21; 21+2=23; #23)
    _, score, done = env.step("5*3=15;15+7=22")
    assert done and score == pytest.approx(1 / 3) and not env.info["captured"]
    env.reset(problem, 0)
    env.step("5,2,3,7")
    _, score, done = env.step("5*2=10;10+7=17;17+3=20")  # {17, 3} cannot make 23 -> wrong at step 2
    assert done and not env.info["captured"]
    env.reset(problem, 0)
    env.step("")
    _, score, done = env.step("7*3=21;2+21=23;#23")  # another valid route
    assert done and score == 1.0 and env.info["captured"]


def test_parse_level():
    assert parse_level("3", 4) == 3 and parse_level(" 2;x", 4) == 2
    assert parse_level("5", 4) is None and parse_level("0", 4) is None and parse_level("x3", 4) is None


# --- warm-start layout ---------------------------------------------------------------------------

def test_episode_batch_trains_actions_and_eos_only():
    tok = build_char_tokenizer()
    env = build_env("lure_arithmetic")
    prompt, segments = pursuit_demo(env, random.Random(0))
    batch = episode_batch(tok, [(prompt, segments), evader_demo(env, random.Random(1))])
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    trained = tok.decode(ids[labels != IGNORE].tolist(), skip_special_tokens=False)
    expected = "".join(text + "<eos>" for text, keep in segments if keep)
    assert trained == expected
    full = tok.decode(ids[batch["attention_mask"][0].bool()].tolist(), skip_special_tokens=True)
    assert full == prompt + "".join(text for text, _ in segments)  # observations sit between actions


def test_lure_plugin_requires_kl_beta_and_checks_names():
    plugin = build("loop", "lure")
    with pytest.raises(ValueError, match="kl_beta"):
        plugin.trainer(None)
    with pytest.raises(ValueError):
        build("loop", "lure", evader_reward="box")
    with pytest.raises(RegistryError):
        build("loop", "lure", beta=0.1)
