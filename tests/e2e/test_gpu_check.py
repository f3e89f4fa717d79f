"""benchmarks/gpu_check.sh --cpu-smoke: the GPU check's code runs on the CPU with a tiny model and prints
one JSON object with every setting's figures (TRL's reported as skipped where trl is not installed)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_runs_on_cpu_and_reports_every_setting(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--cpu-smoke"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)  # stdout is the JSON alone
    assert report["environment"]["cuda"] in (True, False) and report["setting"]["cpu_smoke"] is True
    runs = report["runs"]
    assert set(runs) == {"fp32", "bf16_gc", "lora", "bf16_gc_hf", "trl_bf16_gc", "update_packed", "update_padded"}
    for name in ("fp32", "bf16_gc", "lora", "bf16_gc_hf"):
        assert {"s_per_step", "generation_tokens_per_s", "update_tokens_per_s", "peak_memory_mb"} <= set(runs[name]), \
            runs[name]
        assert runs[name]["s_per_step"] > 0 and runs[name]["update_tokens_per_s"] > 0
    assert runs["lora"]["trainable_parameters"] < runs["fp32"]["trainable_parameters"]
    packed, padded = runs["update_packed"], runs["update_padded"]
    assert packed["update_padding_frac"] == 0.0 and packed["update_tokens"] == packed["real_tokens"]
    assert padded["update_tokens"] >= padded["real_tokens"]
    assert "ratio_packed_over_padded_update" in report
    if importlib.util.find_spec("trl") is None or importlib.util.find_spec("datasets") is None:
        assert "skipped" in runs["trl_bf16_gc"]
    else:
        assert runs["trl_bf16_gc"]["s_per_step"] > 0 and "ratio_rlvr_over_trl_bf16_gc" in report
