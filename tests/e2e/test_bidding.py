"""The auto-bidding simulator (docs/methods.md §2.21): hand-checked accounting, invariants on a fixed seed,
robust parsing, and D-GRPO's plan / role structure through the multi_turn sampler and the trainer."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from rlvr.envs import EPISODE_KEY, EnvError, build_env
from rlvr.envs.bidding import budget_split, market, parse_numbers, reference
from rlvr.registry import build
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from rlvr.types import BatchError, Problem, Rollouts
from tests.helpers.tiny import tiny_config

PRESET = Path(__file__).resolve().parents[2] / "configs" / "methods" / "aigb_dgrpo.yaml"
# (period, q, price): A, B in period 0; C, D in period 1. Price/q ratios: A 2.5, B 6, C 3, D 1.5.
MARKET = [(0, 0.2, 0.5), (0, 0.1, 0.6), (1, 0.3, 0.9), (1, 0.2, 0.3)]


def _day(budget: float, cpa: float) -> Problem:
    return Problem(prompt="day:", meta={"budget": budget, "cpa": cpa, "impressions": MARKET})


def test_golden_accounting_budget_caps_and_reference():
    # B = 1, C = 4, plan "50 50" → caps 0.5 and 0.5 + rollover.
    # Reference (ascending price/q: D, A, C, B): D (spend .3 ≤ 1, .3 ≤ 4·.2) and A (.8 ≤ 1, .8 ≤ 4·.4)
    # are taken; C (1.7 > 1) and B (1.4 > 1) do not fit → value_ref = 0.4.
    env = build_env("auto_bidding")
    assert env.reset(_day(1.0, 4.0), seed=0) == "day:"
    assert env.role() == "planner"
    assert env.step("plan 50 50") == ("\nbid1:", 0.0, False)
    assert env.info["split"] == [0.5, 0.5] and env.info["value_ref"] == pytest.approx(0.4)
    assert env.role() == "executor"
    # Period 0 at α = 1: bids q·C = A 0.8 ≥ 0.5 (won, spend 0.5 ≤ cap 0.5), B 0.4 < 0.6 (lost).
    # value 0.2, cpa 2.5 ≤ 4 → penalty 1, score 0.2/0.4 = 0.5; rollover 0.5 − 0.5 = 0.
    obs, score, done = env.step("x1")
    assert (obs, done) == ("\nspent 0.50 won 0.20 bid2:", False)
    assert score == pytest.approx(0.5)
    # Period 1 at α = 3: C bid 3.6 ≥ 0.9 but 0.9 > cap 0.5 (lost); D bid 2.4 ≥ 0.3, 0.3 ≤ 0.5 (won).
    # spend 0.8, value 0.4, cpa 2 → score 0.4/0.4 = 1.
    obs, score, done = env.step("3")
    assert done and score == pytest.approx(1.0)
    assert env.info["spend"] == pytest.approx(0.8) and env.info["value"] == pytest.approx(0.4)
    assert env.info["wins"] == 2 and env.info["period_spend"] == pytest.approx([0.5, 0.3])
    with pytest.raises(EnvError, match="after the episode ended"):
        env.step("1")


def test_golden_cpa_penalty_and_rollover():
    # B = 2, C = 2, even split (caps 1, then 1 + rollover), α = 5 in both periods.
    # Period 0: A bid 2 ≥ .5 won (spent .5); B bid 1 ≥ .6 but .5 + .6 = 1.1 > cap 1 → lost; rollover .5.
    # Period 1 (cap 1.5): C bid 3 ≥ .9 won (.9); D bid 2 ≥ .3, .9 + .3 = 1.2 ≤ 1.5, total 1.7 ≤ 2 → won.
    # spend 1.7, value 0.7, cpa 1.7/0.7 = 2.428571 > 2 → penalty (2/2.428571)^2 = 0.678201.
    # Reference with C = 2: D (.3 ≤ 2·.2) and A (.8 ≤ 2·.4) taken; C (1.7 > 2·.7 = 1.4) and B
    # (1.4 > 2·.5) break the CPA → value_ref 0.4. Score 0.7·0.678201/0.4 = 1.186851 (> 1: the
    # greedy reference is not an upper bound).
    env = build_env("auto_bidding")
    env.reset(_day(2.0, 2.0), seed=0)
    env.step("no numbers here")
    env.step("5")
    _, score, done = env.step("bid 5")
    assert done
    assert env.info["split"] == [0.5, 0.5]
    assert env.info["period_spend"] == pytest.approx([0.5, 1.2])
    assert env.info["cpa"] == pytest.approx(1.7 / 0.7)
    assert env.info["penalty"] == pytest.approx((2 / (1.7 / 0.7)) ** 2)
    assert score == pytest.approx(0.7 * (2 / (1.7 / 0.7)) ** 2 / 0.4)
    value_ref, per_period = reference(MARKET, 2.0, 2.0)  # A (period 0) and D (period 1)
    assert value_ref == pytest.approx(0.4) and per_period == pytest.approx([0.5, 0.3])


def _replay_accounting(imps, budget, cpa, split, scales):
    """The documented rule, written independently: caps with rollover, second price, budget."""
    spend = value = rollover = 0.0
    for p, scale in enumerate(scales):
        cap, spent = split[p] * budget + rollover, 0.0
        for period, q, c in imps:
            if period == p and scale * q * cpa >= c and spent + c <= cap and spend + c <= budget:
                spent, spend, value = spent + c, spend + c, value + q
        rollover = cap - spent
    return spend, value


def test_fixed_seed_days_never_overspend_and_match_the_documented_accounting():
    task = build("task", "auto_bidding")
    rng = random.Random(0)
    problems = task.problems(6, seed=0)
    assert problems == task.problems(6, seed=0)  # the same seed gives the same days
    for prob in problems:
        for _ in range(4):
            env = build_env("auto_bidding")
            env.reset(prob, seed=123)
            env.step(" ".join(str(rng.randint(0, 100)) for _ in range(rng.randint(0, 3))))
            done = False
            while not done:
                _, score, done = env.step(f"{rng.uniform(0, 6):.2f}")
            info = env.info
            assert info["spend"] <= prob.meta["budget"] + 1e-9
            spend, value = _replay_accounting(market(prob, 0), prob.meta["budget"], prob.meta["cpa"],
                                              info["split"], info["scales"])
            assert info["spend"] == pytest.approx(spend) and info["value"] == pytest.approx(value)
            cpa = spend / value if value else 0.0
            penalty = min(1.0, (prob.meta["cpa"] / cpa) ** 2) if cpa else 1.0
            assert score == pytest.approx(value * penalty / info["value_ref"])
    # the market depends on the problem, not on the reset seed (every row of a group faces one day)
    assert market(problems[0], 1) == market(problems[0], 2)


def test_robust_parsing():
    assert parse_numbers("bid: 1.5!! then 2", 1) == [1.5]
    assert parse_numbers("-3 and .5", 5) == [3.0, 0.5]  # signs ignored: never a negative bid
    assert budget_split("60 40 x1", 2) == pytest.approx([0.6, 0.4])
    assert budget_split("0.3, 0.1", 2) == pytest.approx([0.75, 0.25])
    assert budget_split("70", 2) == pytest.approx([0.5, 0.5])  # missing shares: the mean of the given
    assert budget_split("0 0", 2) == [0.5, 0.5] and budget_split("none", 3) == pytest.approx([1 / 3] * 3)
    env = build_env("auto_bidding", bid_cap=2.0, default_scale=0.0)
    env.reset(_day(1.0, 4.0), 0)
    env.step("")
    env.step("zzz")  # no number → default scale 0: nothing won
    env.step("99")  # clipped to the cap 2
    assert env.info["scales"] == [0.0, 2.0]


def test_task_single_completion_and_episode_scores():
    task = build("task", "auto_bidding")
    prob = task.problems(1, seed=3)[0]
    demo = task.demonstration(prob)
    assert demo.endswith(" x1") and len(parse_numbers(demo, 10)) == 3
    single = task.verify(prob, demo)  # split from the numbers, scale = the last number (1) every period
    env = build_env("auto_bidding")
    env.reset(prob, 0)
    env.step(demo)
    env.step("1")
    _, score, _ = env.step("1")
    assert single.value == pytest.approx(score)
    row = Problem(prompt=prob.prompt, meta={**prob.meta, EPISODE_KEY: {"reward": 0.25, "scores": [0.25]}})
    assert task.verify(row, "ignored").value == 0.25


def test_sampler_roles_and_plans_feed_d_grpo(tmp_path):
    from types import SimpleNamespace

    from rlvr.models import build_char_tokenizer, build_tiny_model
    from rlvr.rollout.samplers import SampleContext
    from rlvr.types import AdvantageInputs
    tok = build_char_tokenizer()
    policy = build_tiny_model(tok, hidden=32, layers=1, heads=2, seed=0).eval()
    task = build("task", "auto_bidding")
    sampler = build("sampler", "multi_turn", env="auto_bidding", max_turns=3, plans=2, cf_samples=0)
    ctx = SampleContext(tokenizer=tok, rollout=SimpleNamespace(max_new_tokens=6, temperature=1.0, top_p=1.0, top_k=0),
                        seed=1)
    batch = sampler.sample(policy, task.problems(2, seed=0), 4, ctx)
    episodes = [p.meta[EPISODE_KEY] for p in batch.problems]  # each row's turns move with the row
    assert episodes[0]["roles"] == ["planner", "executor", "executor"]
    rewards = torch.tensor([[task.verify(p, t).value] for p, t in zip(batch.problems, batch.texts)])
    assert rewards[:, 0].tolist() == pytest.approx([ep["scores"][-1] for ep in episodes])
    out = build("advantage", "d_grpo")(AdvantageInputs(rewards=rewards, mask=batch.completion_mask,
                                                       group_ids=batch.group_ids, plan_ids=batch.plan_ids,
                                                       role_mask=batch.role_mask))
    role, adv = batch.role_mask, out.advantages
    for pid in batch.plan_ids.unique():
        rows = (batch.plan_ids == pid).nonzero().flatten()
        planner = [adv[r][role[r]].unique() for r in rows]
        assert all(p.numel() == 1 for p in planner) and len({float(p) for p in planner}) == 1
        executor = torch.stack([adv[r][batch.completion_mask[r] & ~role[r]][0] for r in rows])
        assert executor.sum().item() == pytest.approx(0.0, abs=1e-5)  # zero mean within a plan
    assert out.metrics["num_plans"].item() == 4


def test_aigb_preset_passes_plans_and_roles_through_the_trainer(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, ["run.steps=1"], path=str(PRESET)))
    trainer.train()
    row = read_metrics(tmp_path)[-1]
    assert row["adv/num_plans"] == 8.0  # 4 prompts × 2 plans: plan_ids reached d_grpo
    assert 0.0 < row["adv/planner_token_frac"] < 1.0  # role_mask reached d_grpo
    with pytest.raises(BatchError, match="plan_ids has shape"):  # a misaligned field fails where it is made
        Rollouts(problems=[Problem("x")] * 2, prompt_ids=torch.zeros(2, 1, dtype=torch.long),
                 prompt_mask=torch.ones(2, 1, dtype=torch.bool), completion_ids=torch.zeros(2, 3, dtype=torch.long),
                 completion_mask=torch.ones(2, 3, dtype=torch.bool), group_ids=torch.zeros(2, dtype=torch.long),
                 plan_ids=torch.zeros(3, dtype=torch.long))
