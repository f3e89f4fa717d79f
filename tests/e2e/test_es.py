"""Tiny-model end-to-end runs of the ES and GRPO→ES presets: metrics, checkpoints, resume, 2 processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from rlvr.loops.es_trainer import ESTrainer
from rlvr.loops.sequential import SequentialTrainer
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.logging import read_metrics
from rlvr.train.run import make_trainer, train_run

from tests.e2e.resume import weights
from tests.helpers.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "configs" / "methods"
# The presets' greedy fitness gives an untrained tiny model reward 0 everywhere (no signal); sample instead,
# and score with toy_coin_test (tests/e2e/tiny.py: ~half of distinct texts score 1), so members whose
# samples differ get different fitness on any machine ("contains 7" left every step of some seeds at 0).
SMALL = ["task.name=toy_coin_test",
         "optim.params.population=4", "optim.params.prompts=3", "optim.params.sigma=0.05", "optim.params.alpha=0.05",
         "optim.params.temperature=1.0", "optim.params.samples_per_prompt=2"]


def _state(run_dir: Path) -> dict:
    return json.loads((latest_checkpoint(run_dir) / "state.json").read_text())


def test_es_preset_trains_and_writes_metrics_and_checkpoint(tmp_path):
    cfg = tiny_config(tmp_path, ["run.steps=3", *SMALL], path=str(PRESETS / "es.yaml"))
    trainer = make_trainer(cfg)
    assert isinstance(trainer, ESTrainer)
    before = weights(trainer.policy)
    summary = trainer.train()
    assert summary["steps"] == 3 and summary["stopped_by"] == "steps" and summary["rollouts"] == 3 * 4 * 3 * 2
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in ("reward/mean", "reward/std", "es/update_norm", "es/js_diversity", "es/z_abs_mean", "timing/es_step"):
        assert key in rows[-1], key
    assert any(r["reward/std"] > 0 for r in rows)  # the sampled fitness varies: ES has a signal
    assert any(not torch.equal(before[k], v) for k, v in weights(trainer.policy).items())
    assert _state(tmp_path)["phase"] == "es" and _state(tmp_path)["step"] == 3
    assert (tmp_path / "config.yaml").exists()


def test_es_feeds_the_selector_and_checkpoints_its_state(tmp_path):
    """A stateful selector (curriculum) observes each prompt's population-mean reward; its state is saved."""
    cfg = tiny_config(tmp_path, ["run.steps=1", "algorithm.selector.name=curriculum",
                                "algorithm.selector.params.ema_decay=0.5", *SMALL],
                      path=str(PRESETS / "es.yaml"))
    trainer = make_trainer(cfg)
    trainer.train()
    success = _state(tmp_path)["plugins"]["selector"]["success"]
    assert len(success) == 3 and success == trainer.parts.selector.state_dict()["success"]


def test_the_rollout_budget_is_a_hard_cap_for_es(tmp_path):
    # An iteration samples population 4 x 3 prompts x 2 = 24 completions: a cap of 60 allows 2 (48; a
    # third would make 72, the overspend the comparisons' ES rows had); scoring the centre too, 30 each: 2 (60).
    for name, extra, per_step in (("plain", [], 24), ("center", ["optim.params.eval_center=true"], 30)):
        cfg = tiny_config(tmp_path / name, ["run.steps=100", "run.max_rollouts=60", *SMALL, *extra],
                          path=str(PRESETS / "es.yaml"))
        summary = make_trainer(cfg).train()
        assert summary["stopped_by"] == "rollouts" and summary["steps"] == 2, name
        assert summary["rollouts"] == 2 * per_step <= 60, name
        assert [r["rollout/sampled_rows"] for r in read_metrics(tmp_path / name)] == [per_step, per_step]
    # GRPO → ES: 2 gradient steps of 16, then ES iterations of 24 under a cap of 90: 32 + 24 + 24 = 80 (not 104)
    cfg = tiny_config(tmp_path / "seq", ["run.steps=100", "run.max_rollouts=90", "optim.params.grpo_steps=2", *SMALL],
                      path=str(PRESETS / "grpo_then_es.yaml"))
    summary = make_trainer(cfg).train()
    assert summary["steps"] == 4 and summary["rollouts"] == 80 and summary["stopped_by"] == "rollouts"


def test_train_run_drives_es_with_before_after_eval(tmp_path):
    cfg = tiny_config(tmp_path, ["run.steps=1", *SMALL], path=str(PRESETS / "es.yaml"))
    summary = train_run(cfg)
    assert summary["steps"] == 1 and "accuracy_after" in summary and (tmp_path / "summary.json").exists()


def test_train_run_drives_grpo_then_es_to_its_final_evaluation(tmp_path):
    """rlvr train / rlvr compare path: the final evaluation is logged at the step both phases reached
    (it used to fail there: the sequential trainer had no `step`)."""
    cfg = tiny_config(tmp_path, ["run.steps=2", "optim.params.grpo_steps=1", *SMALL],
                      path=str(PRESETS / "grpo_then_es.yaml"))
    summary = train_run(cfg)
    assert summary["steps"] == 2 and summary["grpo_steps"] == 1 and "accuracy_after" in summary
    assert json.loads((tmp_path / "summary.json").read_text())["steps"] == 2


def test_grpo_then_es_preset_runs_both_phases(tmp_path):
    cfg = tiny_config(tmp_path, ["run.steps=4", "optim.params.grpo_steps=2", *SMALL],
                      path=str(PRESETS / "grpo_then_es.yaml"))
    trainer = make_trainer(cfg)
    assert isinstance(trainer, SequentialTrainer)
    summary = trainer.train()
    assert summary["steps"] == 4 and summary["grpo_steps"] == 2
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all("loss/total" in r and "es/update_norm" not in r for r in rows[:2])  # gradient phase
    assert all("es/update_norm" in r and "loss/total" not in r for r in rows[2:])  # ES phase
    assert summary["rollouts"] == rows[1]["rollout/spent"] + 2 * 4 * 3 * 2
    assert _state(tmp_path)["phase"] == "es" and _state(tmp_path)["step"] == 4
    assert "grpo_then_es" in (tmp_path / "config.yaml").read_text()  # the whole run's config, not the phase's


def test_es_resume_is_exact(tmp_path):
    full = make_trainer(tiny_config(tmp_path / "full", ["run.steps=4", *SMALL], path=str(PRESETS / "es.yaml")))
    full.train()
    part = make_trainer(tiny_config(tmp_path / "part", ["run.steps=2", *SMALL], path=str(PRESETS / "es.yaml")))
    part.train()
    resumed = make_trainer(tiny_config(tmp_path / "part", ["run.steps=4", *SMALL], path=str(PRESETS / "es.yaml")))
    summary = resumed.train(resume=True)
    assert summary["steps"] == 4 and summary["rollouts"] == 4 * 4 * 3 * 2
    expected = weights(full.policy)
    assert all(torch.equal(expected[k], v) for k, v in weights(resumed.policy).items())
    assert [r["step"] for r in read_metrics(tmp_path / "part")] == [1, 2, 3, 4]


def test_grpo_then_es_resumes_in_the_es_phase(tmp_path):
    def cfg(run: str, steps: int):
        return tiny_config(tmp_path / run, [f"run.steps={steps}", "optim.params.grpo_steps=2", *SMALL],
                           path=str(PRESETS / "grpo_then_es.yaml"))
    full = make_trainer(cfg("full", 4))
    full.train()
    make_trainer(cfg("part", 3)).train()  # 2 GRPO steps + 1 ES step, then "crash"
    resumed = make_trainer(cfg("part", 4))
    resumed.train(resume=True)
    expected = weights(full.policy)
    assert all(torch.equal(expected[k], v) for k, v in weights(resumed.policy).items())
    assert [r["step"] for r in read_metrics(tmp_path / "part")] == [1, 2, 3, 4]


def _run_worker(out: Path, nproc: int) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_port", str(29600 + os.getpid() % 1000), "-m", "tests.e2e.es_worker", str(out)]
    else:
        cmd = [sys.executable, "-m", "tests.e2e.es_worker", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


def test_two_process_es_equals_single_process(tmp_path):
    """Each rank scores its share of the population; after the all-gather every rank applies the same
    update, so the weights are identical across ranks and equal to the single-process run."""
    two = _run_worker(tmp_path / "two", 2)
    one = _run_worker(tmp_path / "one", 1)[0]
    assert [r["world"] for r in two] == [2, 2] and one["world"] == 1
    assert two[0]["flat"] == two[1]["flat"]
    assert two[0]["flat"] == one["flat"]
    assert [r["reward/mean"] for r in two[0]["metrics"]] == [r["reward/mean"] for r in one["metrics"]]
    assert any(r["es/update_norm"] > 0 for r in one["metrics"])  # the weights did move
