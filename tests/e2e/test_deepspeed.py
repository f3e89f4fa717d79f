"""DeepSpeed ZeRO-2/3 through accelerate (``configs/accelerate/zero{2,3}.yaml``) with 2 gloo processes on
CPU against one plain process on the same global batch (tests/e2e/ddp_worker.py).

Tolerance 1e-5 on the updated weights (as DDP): ZeRO reduces each gradient bucket across ranks and the
optimizer updates flat fp32 partitions, so the sums run in another order than one process's (seen here:
~2e-6 after one AdamW step at lr 1e-3)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_distributed import _max_diff, _run

pytest.importorskip("deepspeed")


@pytest.mark.parametrize(("stage", "mode"), [(2, "fixed"), (3, "minibatch")])
def test_zero_update_equals_single_process(tmp_path, stage, mode):
    """fixed: token-mean, micro-batches of 3 rows, entropy bonus; minibatch: 2 optimizer steps per batch."""
    two = _run([mode], tmp_path / "two", 2, accelerate_config=f"configs/accelerate/zero{stage}.yaml")
    one = _run([mode], tmp_path / "one", 1)[0]
    assert [r["backend"] for r in two] == ["DEEPSPEED"] * 2 and two[0]["zero_stage"] == stage
    assert two[0]["world"] == 2 and one["backend"] == "NO"
    assert abs(two[0]["loss"] - one["loss"]) < 1e-6 and abs(one["loss"]) > 1e-3
    assert _max_diff(two[0]["flat"], two[1]["flat"]) == 0.0
    assert _max_diff(two[0]["flat"], one["flat"]) < 1e-5


def test_zero3_trains_generates_and_saves_whole_weights(tmp_path):
    """Two real steps under ZeRO-3: generation on gathered parameters (ranks stop at their own EOS),
    the ranks stay identical, and the checkpoint holds the whole weights (written by rank 0)."""
    ranks = _run(["train"], tmp_path / "train", 2, accelerate_config="configs/accelerate/zero3.yaml")
    assert all(r["zero_stage"] == 3 and r["summary"]["steps"] == 2 for r in ranks)
    assert _max_diff(ranks[0]["flat"], ranks[1]["flat"]) == 0.0
    run = tmp_path / "train" / "run"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["optim/grad_norm"] > 0 for r in rows)
    from safetensors.torch import load_file
    saved = load_file(str(run / "checkpoints" / "step_000002" / "model.safetensors"))
    assert sum(v.numel() for v in saved.values()) >= len(ranks[0]["flat"])  # not ZeRO-3's empty shards
    assert {k: float(v.double().sum()) for k, v in saved.items()} == pytest.approx(
        {k: ranks[0]["params"][k] for k in saved}, abs=1e-4)
