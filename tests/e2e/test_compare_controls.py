"""`rlvr compare` with both controls: the baseline again from the same warm start and held-out problems
with another RL seed (negative), and with a quarter of its rewards flipped (positive), recorded with
warm-start seed, RL seed and role in results.json; every run saves its per-problem outcomes, paired
problem by problem, and results.md reports power."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from rlvr.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _importable_tests(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def test_negative_control_shares_the_warm_start_and_records_its_rl_seed(tmp_path):
    spec = {
        "out_dir": str(tmp_path / "cmp"),
        "base": {"task": {"name": "tests.helpers.tiny:ToyDigit"}, "model": {"hidden": 32, "layers": 1, "heads": 2},
                 "warm_start": {"steps": 2, "batch_size": 4},
                 "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 12},
                 "run": {"eval_every": 0, "eval_problems": 8, "eval_k": 2, "save_every": 0}},
        "methods": {"grpo": {"preset": "grpo"},
                    "grpo_rl": {"preset": "grpo", "role": "negative_control", "rl_seed_offset": 1000},
                    "grpo_flip": {"preset": "grpo", "role": "positive_control",
                                  "overrides": ["algorithm.shapers=[{name: reward_flip, params: {rate: 0.25}}]"]}},
        "seeds": [0], "budget": {"steps": 2}, "jobs": 1,
    }
    path = tmp_path / "cmp.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["compare", str(path), "--threads", "1"]) == 0
    out = tmp_path / "cmp"
    runs = {r["method"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
    assert (runs["grpo"]["seed"], runs["grpo"]["rl_seed"], runs["grpo"]["role"]) == (0, 0, "baseline")
    assert (runs["grpo_rl"]["seed"], runs["grpo_rl"]["rl_seed"], runs["grpo_rl"]["role"]) == \
        (0, 1000, "negative_control")
    configs = {m: yaml.safe_load((out / "runs" / m / "seed0" / "config.yaml").read_text()) for m in runs}
    assert configs["grpo"]["model"]["path"] == configs["grpo_rl"]["model"]["path"]  # the same warm start
    assert configs["grpo"]["run"]["rl_seed"] is None and configs["grpo_rl"]["run"]["rl_seed"] == 1000
    # same weights, same held-out problems: the before-RL evaluation is the same by construction
    assert runs["grpo"]["accuracy_before"] == runs["grpo_rl"]["accuracy_before"]
    # per-problem outcomes: saved before and after, the same problems for every method of the seed
    saved = (out / "runs" / "grpo" / "seed0" / "eval_outcomes.jsonl").read_text()
    rows = [json.loads(line) for line in saved.splitlines()]
    assert [r["phase"] for r in rows] == ["before"] * 8 + ["after"] * 8
    assert sum(r["greedy"] for r in rows[8:]) / 8 == runs["grpo"]["accuracy_after"]
    assert runs["grpo"]["outcomes"]["ids"] == runs["grpo_rl"]["outcomes"]["ids"] == runs["grpo_flip"]["outcomes"]["ids"]
    results = json.loads((out / "results.json").read_text())
    assert set(results["problem_pairs"]) == {"grpo_rl", "grpo_flip"}
    text = (out / "results.md").read_text()
    assert "## Power" in text and "## Problem-level pairing against grpo" in text
    # the positive control's harm fired: 16 rows per step (4 prompts x 4), exactly 4 flipped
    logged = (out / "runs" / "grpo_flip" / "seed0" / "metrics.jsonl").read_text()
    metrics = [json.loads(line) for line in logged.splitlines()]
    flipped = [m["reward/flipped_frac"] for m in metrics if "reward/flipped_frac" in m]
    assert flipped and all(f == 0.25 for f in flipped)
