"""`rlvr compare` end to end: 2 presets x 2 seeds x 3 steps, report files, reuse after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rlvr.cli import main
from rlvr.compare import load_compare
from rlvr.train.config import ConfigError
from tests.helpers.procs import kill_group

ROOT = Path(__file__).resolve().parents[2]


def _write_compare(tmp_path: Path, steps: int = 3, seeds=(0, 1)) -> Path:
    spec = {
        "out_dir": str(tmp_path / "cmp"),
        "base": {"task": {"name": "tests.helpers.tiny:ToyDigit"},
                 "model": {"hidden": 32, "layers": 1, "heads": 2},
                 "warm_start": {"steps": 2, "batch_size": 4},
                 "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 12},
                 "optim": {"lr": 1e-3},
                 "run": {"eval_every": 1, "eval_problems": 8, "eval_k": 2, "save_every": 1}},
        "methods": {"grpo": {"preset": "grpo"}, "dr_grpo": {"preset": "dr_grpo"}},
        "seeds": list(seeds),
        "budget": {"steps": steps},
        "jobs": 2,
    }
    path = tmp_path / "cmp.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(autouse=True)
def _importable_tests(monkeypatch):
    # Runs are subprocesses; they import the test task by its dotted path.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def test_compare_writes_tables_json_and_plots_from_the_runs(tmp_path):
    path = _write_compare(tmp_path)
    assert main(["compare", str(path)]) == 0
    out = tmp_path / "cmp"
    results = json.loads((out / "results.json").read_text())
    runs = {(r["method"], r["seed"]): r for r in results["runs"]}
    assert set(runs) == {("grpo", 0), ("grpo", 1), ("dr_grpo", 0), ("dr_grpo", 1)}
    for (method, seed), record in runs.items():
        summary = json.loads((out / "runs" / method / f"seed{seed}" / "summary.json").read_text())
        assert summary["steps"] == 3 and record["status"] == "done"
        assert record["accuracy_after"] == summary["accuracy_after"]
        assert record["rollouts"] == summary["rollouts"] == 3 * 16
    table = (out / "results.md").read_text()
    assert "grpo" in table and "dr_grpo" in table and "3 optimizer steps per run" in table
    for png in ("curves_steps.png", "curves_rollouts.png", "pass_at_k.png", "entropy.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    # Every method of a seed started from the same warm-started weights.
    before = {m: json.loads((out / "runs" / m / "seed0" / "summary.json").read_text())["eval_before"]
              for m in ("grpo", "dr_grpo")}
    assert before["grpo"] == before["dr_grpo"]


def test_killed_comparison_reuses_finished_runs(tmp_path):
    path = _write_compare(tmp_path, steps=6, seeds=(0,))
    out = tmp_path / "cmp"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.Popen([sys.executable, "-m", "rlvr", "compare", str(path), "--jobs", "1"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    first = out / "runs" / "grpo" / "seed0" / "summary.json"
    deadline = time.time() + 240
    while not first.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert first.exists(), "the first run never finished"
    kill_group(proc, signal.SIGKILL)  # kill the comparison and its running child
    proc.wait()
    assert not (out / "results.json").exists()
    stamp = first.stat().st_mtime_ns
    assert main(["compare", str(path), "--jobs", "1"]) == 0
    assert first.stat().st_mtime_ns == stamp  # reused, not re-run
    plan = {(r["method"], r["seed"]): r for r in json.loads((out / "plan.json").read_text())}
    assert plan[("grpo", 0)]["reused"] is True and plan[("dr_grpo", 0)]["status"] == "done"


def test_bad_comparison_files_are_named(tmp_path):
    path = _write_compare(tmp_path)
    spec = yaml.safe_load(path.read_text())
    spec["methods"]["grpo"]["overrides"] = ["algorithm.loss.epsilon=0.1"]
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"method 'grpo'.*unknown parameter\(s\) \['epsilon'\]"):
        load_compare(path)
    spec["methods"]["grpo"]["overrides"] = []
    spec["budget"] = {"steps": 3, "rollouts": 10}
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match="'budget' must be exactly one of"):
        load_compare(path)


def test_warm_cache_is_shared_by_comparisons_whose_warm_start_agrees(tmp_path):
    from rlvr.compare.runner import warm_key
    path = _write_compare(tmp_path, steps=1, seeds=(0,))
    spec = yaml.safe_load(path.read_text())
    spec["warm_cache"] = str(tmp_path / "warm")
    path.write_text(yaml.safe_dump(spec))
    other = dict(spec, out_dir=str(tmp_path / "other"), methods={"dapo": {"preset": "dapo"}})
    other["base"] = {**spec["base"], "run": {**spec["base"]["run"], "eval_problems": 6}}  # eval is not a key
    other_path = tmp_path / "other.yaml"
    other_path.write_text(yaml.safe_dump(other))
    key = warm_key(load_compare(path).base)
    assert warm_key(load_compare(other_path).base) == key
    changed = {**spec["base"], "warm_start": {"steps": 3, "batch_size": 4}}
    assert warm_key(changed) != key
    assert main(["compare", str(path)]) == 0
    model = tmp_path / "warm" / key / "seed0" / "model.safetensors"
    stamp = model.stat().st_mtime_ns
    assert not (tmp_path / "cmp" / "warm").exists()  # nothing built in the comparison's own folder
    assert main(["compare", str(other_path)]) == 0
    assert model.stat().st_mtime_ns == stamp  # reused, not rebuilt
    runs = json.loads((tmp_path / "other" / "results.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["done"]
    config = yaml.safe_load((tmp_path / "other" / "runs" / "dapo" / "seed0" / "config.yaml").read_text())
    assert Path(config["model"]["path"]) == (tmp_path / "warm" / key / "seed0").resolve()
