"""benchmarks/gpu_check.sh --cpu-smoke: every stage of the staged GPU check runs on the CPU (gloo, the tiny
model) and prints one JSON line on stdout as it ends, each with ``ok: true`` (ZeRO-2 says skipped, and
why, where deepspeed does not import); the exit status is 0."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ["build", "ddp", "fsdp2", "zero2", "packed_lora_bf16", "async_k1", "bf16_gc", "total"]


def leftovers(mark: str) -> list[int]:
    """Processes still alive whose environment carries ``mark`` (everything the check started inherits it)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if mark.encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def run_check(tmp_path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """``gpu_check.sh`` with ``args``; then no process it started may still be alive (the launchers start
    each rank in a session of its own, so a rank can outlive a launcher killed with its group)."""
    key, value = "RLVR_TEST_GPU_CHECK", f"{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", key: value}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)
    deadline = time.monotonic() + 10.0  # a SIGKILLed rank may take a moment to go
    while leftovers(f"{key}={value}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers(f"{key}={value}") == [], proc.stderr[-2000:]
    return proc


def test_the_staged_gpu_check_runs_every_stage_on_cpu(tmp_path):
    proc = run_check(tmp_path, "--cpu-smoke", timeout=900)
    lines = [json.loads(x) for x in proc.stdout.splitlines()]  # stdout is the JSON lines alone
    assert [x["stage"] for x in lines] == STAGES, proc.stderr[-3000:]
    assert all(x["ok"] is True for x in lines), [x for x in lines if not x["ok"]]
    assert proc.returncode == 0
    stage = {x["stage"]: x for x in lines}
    assert stage["build"]["setting"]["cpu_smoke"] is True
    for name in ("ddp", "fsdp2"):  # 2 gloo processes: the process group, the wrapper, every collective
        assert stage[name]["world"] == 2 and stage[name]["backend"] == "gloo"
        assert all(stage[name]["collectives"].values()) and set(stage[name]["collectives"]) == {
            "all_reduce", "all_gather", "broadcast"}
    assert stage["ddp"]["sharding"] == "ddp" and stage["ddp"]["model_wrapper"] == "DistributedDataParallel"
    assert stage["fsdp2"]["sharding"] == "fsdp2" and stage["fsdp2"]["distributed_type"] == "FSDP"
    if importlib.util.find_spec("deepspeed") is None:
        assert "skipped" in stage["zero2"]
    exact = stage["packed_lora_bf16"]
    assert exact["fp32_update_gap"] <= exact["rtol"]["fp32"] and exact["bf16_update_gap"] <= exact["rtol"]["bf16"]
    assert stage["async_k1"]["generator_device"] == "cpu" and stage["async_k1"]["s_per_step"] > 0
    for name in ("ddp", "fsdp2", "packed_lora_bf16", "async_k1", "bf16_gc"):
        assert stage[name]["peak_memory_mb"] > 0, stage[name]


def test_a_stage_that_fails_gives_its_line_and_the_next_stage_still_runs(tmp_path):
    """A stage past its time limit is killed with its ranks: a line saying so, then the next."""
    proc = run_check(tmp_path, "--cpu-smoke", "--limit-s", "3", "--stages", "fsdp2", "bf16_gc", timeout=300)
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [x["stage"] for x in lines] == ["build", "fsdp2", "bf16_gc", "total"], proc.stderr[-3000:]
    assert lines[1]["ok"] is False and "timed out after 3 s" in lines[1]["error"] and "output_tail" in lines[1]
    assert lines[2]["ok"] is False and lines[3]["ok"] is False and proc.returncode == 1
