"""benchmarks/every_method_smollm2.py on a tiny Llama chat model built here (the real SmolLM2 folder is a
98 MB wheel CI does not fetch): the same code path as the real table (preset + the recipe's reasoning-gym
task, bf16 autocast, one subprocess per run), on two presets: one whose mechanism fires whatever the model
samples (active_selection's label budget and fresh prompts), one rlvr refuses on this task (cliff's
first-mistake oracle needs a per-step checker, which reasoning-gym lacks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from rlvr.models.real import make_example  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "every_method_smollm2.py"


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    folder = tmp_path_factory.mktemp("every_method")
    model = make_example(folder / "chat", arch="llama", size="tiny", problems=8)["model"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    md = folder / "table.md"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--model", model, "--presets", "active_selection,cliff",
                           "--steps", "2", "--prompts", "2", "--group", "2", "--max-new-tokens", "6",
                           "--markdown", str(md)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), md.read_text()  # stdout is the JSON alone


def test_a_preset_whose_mechanism_fires_reports_its_metrics_speed_and_memory(table):
    out, _ = table
    row = next(r for r in out["presets"] if r["preset"] == "active_selection")
    assert row["status"] == "fired", row
    assert row["task"] == "reasoning_gym" and row["steps"] == [2]
    (check,) = row["checks"]
    assert check["fired"] is True
    metrics = check["metrics"]  # every metric the predicate read, one value per step
    assert set(metrics) >= {"select/labelled", "select/label_budget", "select/trained_distinct"}
    assert all(len(v) == 2 for v in metrics.values())
    assert all(0 < n <= b for n, b in zip(metrics["select/labelled"], metrics["select/label_budget"]))
    assert len(row["s_per_step"]) == 1 and row["s_per_step"][0] > 0 and row["peak_rss_mb"] > 0


def test_a_refused_preset_carries_rlvrs_reason(table):
    out, md = table
    row = next(r for r in out["presets"] if r["preset"] == "cliff")
    assert row["status"] == "refused" and "checks" in row and row["checks"] == []
    assert "no per-step checker" in row["reason"] and "reasoning_gym" in row["reason"]
    assert out["counts"] == {"fired": 1, "refused": 1}
    setting = out["setting"]
    assert setting["model_architectures"] == ["LlamaForCausalLM"] and setting["threads"] == 1
    assert setting["steps"] == 2 and setting["processor"]
    lines = md.splitlines()
    assert lines[0].startswith("| preset | status |")
    assert any(line.startswith("| cliff | refused |") and "no per-step checker" in line for line in lines)
    assert any(line.startswith("| active_selection | fired | reasoning_gym |") for line in lines)


def test_every_preset_has_a_check_and_every_testbed_only_setting_a_real_model_one():
    bench = _load()
    presets = {p.stem for p in (ROOT / "configs" / "methods").glob("*.yaml")}
    assert presets == set(bench.MECHANISMS) | set(bench.MORE_MECHANISMS)  # the table judges every preset
    assert all(bench.checks_of(p) for p in presets)
    for preset, checks in bench.MECHANISMS.items():  # a toy task of the testbed never reaches SmolLM2
        for check in checks:
            for override in bench.smollm2_overrides(preset, check):  # one key=value each (a swap may give several)
                assert isinstance(override, str) and "=" in override and "toy_" not in override, (preset, override)


def _load():
    import importlib.util
    spec = importlib.util.spec_from_file_location("every_method_smollm2", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
