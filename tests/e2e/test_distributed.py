"""Data-parallel training with 2 processes on the gloo backend (torchrun), against one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tolerance import assert_same_loss, assert_same_update

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], out: Path, nproc: int, accelerate_config: str | None = None,
         overrides: list[str] | None = None) -> list[dict]:
    """Run ``tests.e2e.ddp_worker MODE OUT [overrides]`` in ``nproc`` processes (torchrun, or ``accelerate
    launch --config_file accelerate_config``, e.g. FSDP2) or in this interpreter's one plain process."""
    # This checkout's src first (not whichever rlvr is installed), then the repo root for tests.e2e.
    path = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    worker = ["-m", "tests.e2e.ddp_worker", *args, str(out), *(overrides or [])]
    port = str(29500 + os.getpid() % 1000)
    if accelerate_config:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", accelerate_config,
               "--num_processes", str(nproc), "--main_process_port", port, *worker]
    elif nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_port", port, *worker]
    else:
        cmd = [sys.executable, *worker]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


def _max_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


# The same global batch on 2 ranks and on 1 process: the 2-rank loss (mean of the ranks' shares) and
# the updated weights must equal the 1-process run.
#   fixed: token-mean, micro-batches of 3 rows, an entropy bonus;
#   fixed_masked: mask_truncated_completions with uneven truncation per rank (global num_seqs);
#   minibatch: M = 2 optimizer steps per batch, each rank's mini-batch j its share of global mini-batch j.
@pytest.mark.parametrize("mode", ["fixed", "fixed_masked", "minibatch"])
def test_two_process_update_equals_single_process(tmp_path, mode):
    two = _run([mode], tmp_path / "two", 2)
    one = _run([mode], tmp_path / "one", 1)[0]
    assert two[0]["world"] == 2 and one["world"] == 1
    assert_same_loss(two[0]["loss"], one["loss"])
    assert abs(one["loss"]) > 1e-3  # a non-trivial loss
    assert _max_diff(two[0]["flat"], two[1]["flat"]) == 0.0
    assert_same_update(two[0]["flat"], one["flat"], one["init"])


def test_two_process_update_with_the_exact_savings_equals_single_process_without(tmp_path):
    """Zero-advantage rows left out and micro-batches trimmed, on 2 ranks where rank 1 holds only
    unanimous groups (it computes one zero-gradient row so its backward still joins the all-reduce):
    the weights equal one process with every row computed at full padding."""
    two = _run(["savings"], tmp_path / "two", 2)
    off = _run(["savings_off"], tmp_path / "off", 1)[0]
    # rank 0 computes every row (2 micro-batches a mini-batch); rank 1 one row of each 4-row mini-batch
    assert (two[0]["skipped"], two[1]["skipped"], off["skipped"]) == (0.0, 0.75, 0.0)
    assert_same_loss(two[0]["loss"], off["loss"])
    assert abs(off["loss"]) > 1e-3
    assert _max_diff(two[0]["flat"], two[1]["flat"]) == 0.0
    assert_same_update(two[0]["flat"], off["flat"], off["init"])


def test_a_callback_stopping_on_one_rank_stops_every_rank(tmp_path):
    ranks = _run(["stop"], tmp_path / "stop", 2)
    assert all(r["summary"]["stopped_by"] == "callback" and r["summary"]["steps"] == 1 for r in ranks)
    assert _max_diff(ranks[0]["flat"], ranks[1]["flat"]) == 0.0


def test_two_process_lora_update_equals_single_process(tmp_path):
    """With a LoRA policy (only the adapter trains) the 2-rank update equals 1 process too."""
    pytest.importorskip("peft")
    two = _run(["fixed_lora"], tmp_path / "two", 2)
    one = _run(["fixed_lora"], tmp_path / "one", 1)[0]
    assert_same_loss(two[0]["loss"], one["loss"])
    assert abs(one["loss"]) > 1e-3
    assert _max_diff(two[0]["flat"], two[1]["flat"]) == 0.0
    assert_same_update(two[0]["flat"], one["flat"], one["init"])
    adapter = {k: v for k, v in one["params"].items() if "lora_B" in k}
    assert adapter and any(v != 0.0 for v in adapter.values())  # B left zero: the adapter trained


def test_two_process_training_keeps_ranks_identical(tmp_path):
    ranks = _run(["train"], tmp_path / "train", 2)
    assert all(r["world"] == 2 and r["summary"]["steps"] == 2 for r in ranks)
    assert _max_diff(ranks[0]["flat"], ranks[1]["flat"]) == 0.0
    rows = [json.loads(x) for x in (tmp_path / "train" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]  # only the main process writes
