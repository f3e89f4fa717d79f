"""TRL-signature reward functions in a training run: two of them (one reading an extra dataset column,
one async) train 2 steps with weights beside the verdict and appear as reward/<name>; a raising and a
hanging one score 0 with the reason in samples.jsonl; the verifier pool ends with the run."""

from __future__ import annotations

import json

import pytest

from rlvr.sandbox import pool as pool_mod
from rlvr.sandbox.pool import active
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from tests.helpers.tiny import TINY
from tests.unit.tasks.test_verifier_pool import alive
from rlvr.train.config import ConfigError, load_config

pytest.importorskip("math_verify")

F = "tests.helpers.reward_fns:"
REWARDS = [{"fn": F + "mentions_unit", "weight": 1.0}, {"fn": F + "brevity", "weight": 0.5},
           {"fn": F + "explodes", "weight": 0.1}, {"fn": F + "hangs_sometimes", "weight": 0.1, "name": "slow"}]


NEVER = "unit-too-long"  # 13 characters: longer than any completion (TINY's 12 new tokens)


def _config(tmp_path, rewards=REWARDS, steps=2, **algorithm):
    data = tmp_path / "train.jsonl"
    # The unit decides mentions_unit whatever is sampled: "" is in every completion, and a 13-character
    # unit is in none (12 new tokens of a character vocabulary; "1"/"2" were in a sampled text by luck).
    # The 2 steps' prompts (data order: Python's seeded RNG, no floats) include both kinds of row.
    data.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i),
                                        "unit": "" if i % 4 == 1 else NEVER})
                            + "\n" for i in range(10, 40)))
    tree = {**TINY, "task": {"name": "dataset", "params": {"path": str(data), "meta_columns": ["unit"]}},
            "rollout": {**TINY["rollout"], "verify_workers": 2, "verify_timeout_s": 0.5},
            "algorithm": {"advantage": {"name": "gdpo"}, "rewards": rewards, **algorithm},
            "run": {**TINY["run"], "steps": steps, "out_dir": str(tmp_path / "run")}}
    return load_config(None, [], base=tree)


@pytest.fixture
def pool_pids(monkeypatch):
    """The worker pids of every pool, recorded as it closes."""
    seen: list[int] = []
    close = pool_mod.VerifierPool.close

    def recording_close(self):
        seen.extend(self.pids())
        close(self)

    monkeypatch.setattr(pool_mod.VerifierPool, "close", recording_close)
    return seen


def _gone(pids):
    import time
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def test_trl_reward_functions_train_with_weights(tmp_path, pool_pids):
    trainer = Trainer(_config(tmp_path))
    summary = trainer.train()
    assert summary["steps"] == 2
    rows = read_metrics(tmp_path / "run")
    for row in rows:
        for name in ("mentions_unit", "brevity", "explodes", "slow"):
            assert f"reward/{name}" in row, name
        assert row["reward/explodes"] == 0.0 and 0.0 < row["reward/brevity"] < 1.0
        assert row["reward/verifier_errors"] == 16  # explodes fails on every row of 4 x 4
    # the unit column was read, row by row: rows of unit "" score 1, the others 0
    units = [row["reward/mentions_unit"] for row in rows]
    assert any(0.0 < u for u in units) and any(u < 1.0 for u in units)
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    errors = [s["verifier_error"] for s in samples]
    assert all("reward 'explodes': RuntimeError: reward function exploded" in e for e in errors)
    assert any("reward 'slow': timeout after 0.5 s" in e for e in errors)
    assert all(len(s["reward"]) == 5 for s in samples)  # [correct, mentions_unit, brevity, explodes, slow]
    assert active() is None and pool_pids and _gone(pool_pids)  # no worker outlived the run


def test_weights_reach_the_advantage(tmp_path, monkeypatch):
    trainer = Trainer(_config(tmp_path, REWARDS[:2], steps=1, reward_weights=[0.25]))
    seen = []
    estimator = type(trainer.parts.advantage)
    call = estimator.__call__
    monkeypatch.setattr(estimator, "__call__", lambda self, inputs: seen.append(inputs) or call(self, inputs))
    trainer.train()
    assert seen and seen[0].reward_weights.tolist() == [0.25, 1.0, 0.5]  # [correct, mentions_unit, brevity]
    assert seen[0].rewards.shape[1] == 3


def test_pool_is_closed_when_the_run_fails(tmp_path, pool_pids, monkeypatch):
    trainer = Trainer(_config(tmp_path, REWARDS[:1], steps=1))
    collect = trainer.collector.collect

    def collect_then_fail(model, step, budget=None):
        collect(model, step, budget)
        raise RuntimeError("step failed")

    monkeypatch.setattr(trainer.collector, "collect", collect_then_fail)
    with pytest.raises(RuntimeError, match="step failed"):
        trainer.train()
    assert active() is None and pool_pids and _gone(pool_pids)


def test_bad_reward_entry_fails_before_any_work(tmp_path):
    cfg = load_config(None, ["algorithm.rewards=[{fn: 'tests.helpers.reward_fns:constant', w: 1}]"],
                      base={**TINY, "run": {**TINY["run"], "out_dir": str(tmp_path)}})
    with pytest.raises(ConfigError, match=r"algorithm.rewards\[0\]: unknown key\(s\) \['w'\]"):
        Trainer(cfg)
    assert not (tmp_path / "config.yaml").exists()
