"""Tiny-model runs of the LURE preset: self-play metrics, the round-anchored KL, checkpoints, resume."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch

from rlvr.envs.lure import STEP_SEP, LureEnvironment
from rlvr.loops.lure_self_play import SelfPlayCollector
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.logging import read_metrics
from rlvr.train.run import make_trainer, train_run

from tests.e2e.resume import crash_then_resume, weights
from tests.helpers.tiny import tiny_config

PRESET = str(Path(__file__).resolve().parents[2] / "configs" / "methods" / "lure.yaml")
# Small self-play; a short warm start so proposals name levels; an entropy bonus so every step moves
# the weights (the KL to the round's anchor is then > 0 after its first step).
SMALL = ["optim.params.warm_start_steps=10", "optim.params.warm_start_batch=8", "optim.params.evader_group=2",
         "optim.params.captures_per_task=2", "optim.params.max_turns=3", "optim.params.turn_tokens=10",
         "algorithm.entropy_coef=0.01"]


def test_lure_preset_self_plays_with_a_round_anchored_kl(tmp_path):
    cfg = tiny_config(tmp_path, ["run.steps=3", "optim.params.round_steps=2", *SMALL], path=PRESET)
    summary = train_run(cfg)
    assert summary["steps"] == 3 and summary["stopped_by"] == "steps" and "accuracy_after" in summary
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in ("reward/mean", "lure/evader_reward", "lure/valid_frac", "lure/capture_rate", "lure/anchored",
                "lure/level/lure_arithmetic", "lure/capture_rate/lure_countdown", "lure/progress/lure_arithmetic",
                "loss/kl", "adv/abs_mean", "timing/rollout", "rollout/turns_mean/lure_countdown"):
        assert key in rows[-1], key
    assert all(math.isfinite(r["loss/total"]) for r in rows)
    # rounds of 2 steps: the reference is re-anchored at steps 1 and 3, where the KL is exactly 0
    assert [r["lure/anchored"] for r in rows] == [1.0, 0.0, 1.0]
    assert rows[0]["loss/kl"] == 0.0 and rows[2]["loss/kl"] == 0.0 and rows[1]["loss/kl"] > 0.0
    # 2 environments x 1 evader prompt x G = 2 proposals, each pursued M = 2 times: 4 + 8 rows
    assert rows[0]["rollout/sampled_rows"] == 12
    assert latest_checkpoint(tmp_path) is not None and (tmp_path / "reference" / "model.safetensors").exists()


def test_lure_resume_mid_round_is_exact(tmp_path, monkeypatch):
    overrides = ["run.steps=4", "run.save_every=2", "optim.params.round_steps=3", *SMALL]
    full = make_trainer(tiny_config(tmp_path / "full", overrides, path=PRESET))
    assert isinstance(full.collector, SelfPlayCollector)
    full.train()
    expected = weights(full.policy)

    # resumes at step 2 of round [0, 3): the reference must be the round's anchor, not the initial model
    resumed = crash_then_resume(monkeypatch, lambda: make_trainer(tiny_config(tmp_path / "crash", overrides,
                                                                              path=PRESET)))
    assert isinstance(resumed.collector, SelfPlayCollector)
    got = weights(resumed.policy)
    for key in expected:
        assert torch.equal(expected[key], got[key]), key
    kl = [r["loss/kl"] for r in read_metrics(tmp_path / "crash")]
    assert kl == [r["loss/kl"] for r in read_metrics(tmp_path / "full")]


def test_heldout_capture_is_measured_before_and_after_and_lr_zero_is_a_frozen_control(tmp_path):
    # rlvr train adds LURE's held-out pursuit capture to both evaluations (heldout/... keys, which rlvr
    # compare pairs); optim.lr=0 (the self_play comparison's baseline) runs self-play without moving a weight.
    overrides = ["run.steps=2", "optim.lr=0", "optim.params.warm_start_steps=0", "optim.params.eval_tasks_per_level=1",
                 "optim.params.eval_samples=2", *SMALL[2:]]
    cfg = tiny_config(tmp_path, overrides, path=PRESET)
    trainer = make_trainer(cfg)
    start = weights(trainer.policy)
    first = trainer.heldout_metrics()
    assert trainer.heldout_metrics() == first  # fixed tasks and a fixed sampling stream
    assert set(first) == {"heldout/capture", "heldout/solved", "heldout/progress", "heldout/capture/lure_arithmetic",
                          "heldout/capture/lure_countdown"}
    assert all(0.0 <= v <= 1.0 for v in first.values())
    summary = train_run(cfg, model=trainer.policy, tokenizer=trainer.tokenizer)
    assert summary["steps"] == 2 and summary["eval_before"]["heldout/capture"] == first["heldout/capture"]
    assert "heldout/solved" in summary["eval_after"]
    assert read_metrics(tmp_path)[-1]["rollout/sampled_rows"] > 0
    end = weights(trainer.policy)
    for key in start:
        assert torch.equal(start[key], end[key]), key


def test_heldout_tasks_cover_every_level_and_come_from_their_own_stream():
    import random

    from rlvr.envs.base import build_env
    from rlvr.loops.lure_eval import heldout_tasks

    env = build_env("lure_arithmetic")
    tasks = heldout_tasks(env, 3, seed=0)
    assert [t.meta["level"] for t in tasks] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    assert [t.prompt for t in tasks] == [t.prompt for t in heldout_tasks(env, 3, seed=0)]
    assert [t.prompt for t in tasks] != [t.prompt for t in heldout_tasks(env, 3, seed=1)]
    training = [env.task_at(4, random.Random(f"lure:{s}:{i}")).prompt for s in range(50) for i in range(8)]
    assert not {t.prompt for t in tasks if t.meta["level"] == 4} & set(training)  # 4-digit sums: no overlap


@pytest.fixture
def half_oracle_pursuit(monkeypatch):
    """Every other pursuit episode plays the environment's own demonstration (the plan, then every
    worked step and the answer in one turn: captured, progress 1) and the rest answer a wrong first
    step (escaped, progress 0). Each task's M = 4 episodes are made one after another, so every
    capture rate is exactly 1/2 whatever the policy samples: the mechanism fires by construction, on
    any machine (no warm start has to reach a particular state)."""
    made = itertools.count()
    reset, step = LureEnvironment.reset, LureEnvironment.step

    def oracle_reset(self, problem, seed):
        self._oracle = next(made) % 2 == 0
        return reset(self, problem, seed)

    def oracle_step(self, action):
        if self._turns == 0:  # the planner's turn: the oracle names the right plan
            action = self.plan_of(self._problem) if self._oracle else action
        else:
            action = STEP_SEP.join(self.gold_steps(self._problem)) if self._oracle else "0+0=1"
        return step(self, action)

    monkeypatch.setattr(LureEnvironment, "reset", oracle_reset)
    monkeypatch.setattr(LureEnvironment, "step", oracle_step)


def test_lure_mechanism_fires_once_the_pursuer_captures_some_tasks(tmp_path, half_oracle_pursuit):
    # The frontier reward and the progress credit need captures strictly between none and all of a task's
    # M episodes; the half-oracle pursuit gives c = 1/2 for every task, so the evader reward is
    # 1 - |2c - 1| = 1 > 0 for every valid proposal and captured episodes earn progress credit.
    overrides = ["run.steps=2", "optim.params.warm_start_steps=10", "optim.params.warm_start_batch=8",
                 "optim.params.evader_group=2", "optim.params.captures_per_task=4", "optim.params.max_turns=4",
                 "optim.params.turn_tokens=12", "optim.params.eval_tasks_per_level=0"]
    trainer = make_trainer(tiny_config(tmp_path, overrides, path=PRESET))
    trainer.train()
    rows = read_metrics(tmp_path)
    assert all(r["lure/capture_rate"] == 0.5 for r in rows)
    assert any(r["lure/evader_reward"] > 0.0 for r in rows)  # 1 - |2c - 1| > 0 needs 0 < c < 1 for a task
    assert all(r["lure/credit_sum/lure_arithmetic"] > 0.0 and r["lure/credit_sum/lure_countdown"] > 0.0
               for r in rows)
    assert all(r["adv/abs_mean"] > 0.0 for r in rows)


def test_the_warm_start_runs_once_and_before_the_evaluation_before_rl(tmp_path, monkeypatch):
    # rlvr train's evaluation before RL must measure the warm-started pursuer (the point self-play starts
    # from), so LURE warms up at its first evaluation or step, whichever comes first, and only once.
    import rlvr.loops.lure_self_play as lure_module
    events: list[str] = []
    warm, heldout = lure_module.warm_start, lure_module.pursuit_heldout
    monkeypatch.setattr(lure_module, "warm_start", lambda *a, **k: (events.append("warm"), warm(*a, **k))[1])
    monkeypatch.setattr(lure_module, "pursuit_heldout",
                        lambda *a, **k: (events.append("heldout"), heldout(*a, **k))[1])
    cfg = tiny_config(tmp_path, ["run.steps=1", "optim.params.eval_tasks_per_level=1", "optim.params.eval_samples=1",
                                 *SMALL], path=PRESET)
    summary = train_run(cfg)
    assert events == ["warm", "heldout", "heldout"]
    assert "heldout/capture" in summary["eval_before"] and "heldout/capture" in summary["eval_after"]


def test_another_rl_seed_changes_self_play_but_not_the_warm_start_or_the_heldout_tasks(tmp_path, monkeypatch):
    # run.rl_seed (a comparison's negative control) must reach self-play's sampling and task draws, while
    # the warm start and the held-out pursuit stay on run.seed.
    from rlvr.train.collect import step_seed
    seeds: list[int] = []
    trainers = []
    for rl_seed in (None, 1000):
        extra = [] if rl_seed is None else [f"run.rl_seed={rl_seed}"]
        trainer = make_trainer(tiny_config(tmp_path / str(rl_seed), ["run.steps=1", "run.seed=3", *extra, *SMALL],
                                           path=PRESET))
        trainer.collector.warm_up(trainer.policy)
        sample = trainer.collector.proposer.sample
        monkeypatch.setattr(trainer.collector.proposer, "sample",
                            lambda model, problems, n, ctx, _s=sample: (seeds.append(ctx.seed), _s(model, problems, n, ctx))[1])
        trainer.collector.self_play(trainer.policy, 0)
        trainers.append(trainer)
    assert seeds == [step_seed(3, 0, 0), step_seed(1000, 0, 0)]
    first, second = (weights(t.policy) for t in trainers)
    assert all(torch.equal(first[k], second[k]) for k in first)  # the same warm start (run.seed = 3)


def test_a_cached_warm_start_equals_the_warm_start_bit_for_bit(tmp_path, monkeypatch):
    # Exact speed-up: the second trainer loads what the first saved instead of warming up; its weights
    # equal a trainer that warmed up itself, and a change of warm-start setting misses the cache.
    import rlvr.loops.lure_self_play as lure_module
    runs: list[int] = []
    warm = lure_module.warm_start
    monkeypatch.setattr(lure_module, "warm_start", lambda *a, **k: (runs.append(1), warm(*a, **k))[1])

    def warmed(name: str, *extra: str):
        trainer = make_trainer(tiny_config(tmp_path / name, ["run.steps=1", *SMALL, *extra], path=PRESET))
        trainer.collector.warm_up(trainer.policy)
        return weights(trainer.policy)

    cache = f"optim.params.warm_start_cache={tmp_path / 'cache'}"
    plain, first, second = warmed("plain"), warmed("first", cache), warmed("second", cache)
    assert len(list((tmp_path / "cache").iterdir())) == 1 and len(runs) == 2  # the second one loaded
    for key in plain:
        assert torch.equal(plain[key], first[key]) and torch.equal(plain[key], second[key]), key
    other = warmed("other", cache, "optim.params.warm_start_lr=0.001")
    assert len(list((tmp_path / "cache").iterdir())) == 2 and len(runs) == 3
    assert any(not torch.equal(plain[k], other[k]) for k in plain)
