"""DeepSpeed ZeRO-2/3 through accelerate (``configs/accelerate/zero{2,3}.yaml``) with 2 gloo processes on
CPU against one plain process on the same global batch (tests/e2e/ddp_worker.py).

Tolerance 1e-5 on the updated weights (as DDP): ZeRO reduces each gradient bucket across ranks and the
optimizer updates flat fp32 partitions, so the sums run in another order than one process's (seen here:
~2e-6 after one AdamW step at lr 1e-3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.e2e.test_distributed import ROOT, _max_diff, _run
from tests.e2e.test_multinode import assert_same_updates, free_port, run_cli, write_config
from tests.helpers.tolerance import assert_same_loss, assert_same_update

pytest.importorskip("deepspeed")


@pytest.mark.parametrize(("stage", "mode"), [(2, "fixed"), (3, "minibatch")])
def test_zero_update_equals_single_process(tmp_path, stage, mode):
    """fixed: token-mean, micro-batches of 3 rows, entropy bonus; minibatch: 2 optimizer steps per batch."""
    two = _run([mode], tmp_path / "two", 2, accelerate_config=f"configs/accelerate/zero{stage}.yaml")
    one = _run([mode], tmp_path / "one", 1)[0]
    assert [r["backend"] for r in two] == [f"zero{stage}"] * 2
    assert two[0]["world"] == 2 and one["backend"] == "single"
    assert_same_loss(two[0]["loss"], one["loss"])
    assert abs(one["loss"]) > 1e-3
    if stage == 2:  # whole parameters on every rank
        assert _max_diff(two[0]["flat"], two[1]["flat"]) == 0.0
    else:  # ZeRO-3 gathers the full weights into the main process only (one module at a time)
        assert two[1]["flat"] == [] and len(two[0]["flat"]) == len(one["flat"])
    assert_same_update(two[0]["flat"], one["flat"], one["init"])


def test_zero3_cli_run_equals_one_process(tmp_path):
    """``accelerate launch --config_file zero3.yaml -m rlvr.cli train``: two real steps with generation in
    lock-step on sharded parameters (ranks' completions end at different lengths), an evaluation after
    each step, checkpoints and the exported final/ with the whole weights, all equal to one process's."""
    config = write_config(tmp_path, eval_every=1)
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                str(ROOT / "configs/accelerate/zero3.yaml"), "--num_processes", "2",
                "--main_process_port", str(free_port())]
    run, one = run_cli(launcher, config, tmp_path / "zero3"), run_cli([sys.executable], config, tmp_path / "single")
    assert_same_updates(run, one, processes=2)
    rows, ones = ([json.loads(x) for x in (r / "metrics.jsonl").read_text().splitlines()] for r in (run, one))
    assert [r["step"] for r in rows] == [1, 2] and all("eval/accuracy" in r for r in rows)
    # DeepSpeed's global gradient norm (before clipping) is the one process's clip_grad_norm_ total
    assert rows[0]["optim/grad_norm"] > 0.1
    assert [r["optim/grad_norm"] for r in rows] == pytest.approx([r["optim/grad_norm"] for r in ones], abs=1e-5)


def test_zero3_saving_gathers_one_module_at_a_time_and_equals_the_previous_gather(tmp_path):
    """The full state the checkpoint gets under ZeRO-3, through ``DeepSpeedSharding.model_state``, equals the
    previous code's (every parameter gathered at once, then cloned) on the main process, while holding at
    most one module's parameters whole at once; the other rank joins every gather and keeps nothing."""
    path = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    config = str(ROOT / "configs/accelerate/zero3.yaml")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", config,
           "--num_processes", "2", "--main_process_port", str(free_port()), "-m", "tests.e2e.zero3_gather_worker",
           str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    main, other = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert main["backend"] == "zero3" and main["whole_after"] == 0  # partitioned again after saving
    assert main["keys"] == main["old_keys"] and main["equal"] and main["on_host"]
    assert main["old_peak"] == main["total"] and main["new_peak"] == main["largest"] < main["total"] / 3
    assert other["keys"] == [] and other["new_peak"] == main["new_peak"]


@pytest.mark.parametrize(("stage", "mode"), [(2, "fixed"), (3, "minibatch")])
def test_zero_update_from_a_checkpoint_equals_single_process(tmp_path, stage, mode):
    """model.path under ZeRO: with ZeRO-2 rank 0 reads the checkpoint and rank 1 receives it
    (rlvr.train.shared_load); with ZeRO-3 every rank calls transformers' loader, which builds the model
    inside deepspeed.zero.Init and loads rank 0's values (``Sharding.loads_collectively``). The weights
    before the update and the update equal one process's."""
    from rlvr.models.real import make_example
    model = make_example(tmp_path / "example", size="tiny", problems=16)["model"]
    extra = [f"model.path={model}", "rollout.max_new_tokens=6"]
    two = _run([mode], tmp_path / "two", 2, accelerate_config=f"configs/accelerate/zero{stage}.yaml",
               overrides=extra)
    one = _run([mode], tmp_path / "one", 1, overrides=extra)[0]
    assert [r["backend"] for r in two] == [f"zero{stage}"] * 2
    assert two[0]["init"] == one["init"]  # the checkpoint's weights (gathered from the shards under ZeRO-3)
    assert_same_loss(two[0]["loss"], one["loss"])
    assert_same_update(two[0]["flat"], one["flat"], one["init"])
