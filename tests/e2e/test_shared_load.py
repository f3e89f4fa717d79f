"""Only the main process reads the checkpoint (rlvr.train.shared_load): 2 gloo processes under torchrun,
rank 1 given a copy of the model folder without its weight file and with every weight loader replaced by
one that raises, both end with the same tensors as one process that loaded the file (non-persistent
buffers included, tied weights still tied), the same generation config and the same random state."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rlvr.models.real import make_example
from rlvr.train.build import build_model
from tests.e2e.shared_load_worker import facts, held_tensors
from tests.e2e.test_distributed import ROOT, _max_diff, _run
from tests.e2e.test_multinode import free_port
from tests.helpers.tiny import tiny_config
from tests.helpers.tolerance import assert_same_loss, assert_same_update


def _launch(model: Path, other: Path, out: Path) -> subprocess.CompletedProcess:
    path = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
           str(free_port()), "-m", "tests.e2e.shared_load_worker", str(model), str(other), str(out)]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("saved", ["float32", "bfloat16"])  # bfloat16: loaded as float32 master weights
def test_rank_1_never_reads_the_checkpoint_and_holds_the_files_weights(tmp_path, saved):
    model = Path(make_example(tmp_path / "example", size="tiny", problems=16)["model"])
    if saved != "float32":  # the same checkpoint written in another dtype
        AutoModelForCausalLM.from_pretrained(str(model), dtype=getattr(torch, saved)).save_pretrained(str(model))
    other = tmp_path / "no_weights"
    shutil.copytree(model, other, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    assert not list(other.glob("*.safetensors")) and (other / "config.json").is_file()
    proc = _launch(model, other, tmp_path / "out")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    torch.manual_seed(tiny_config(tmp_path / "one").run.training_seed)
    one, _ = build_model(tiny_config(tmp_path / "one", [f"model.path={model}"]))  # one process, the file
    alone, alone_facts = held_tensors(one), json.loads(json.dumps(facts(one)))
    on_file = load_file(str(model / "model.safetensors"))
    assert {t.dtype for t in on_file.values()} == {getattr(torch, saved)}
    for rank in (0, 1):
        held = load_file(str(tmp_path / "out" / f"rank{rank}.safetensors"))
        assert held.keys() == alone.keys()
        assert all(torch.equal(held[k], alone[k]) and held[k].dtype == alone[k].dtype for k in alone)
        assert all(torch.equal(held[k], on_file[k].to(held[k].dtype)) for k in on_file)  # the file's weights
        assert json.loads((tmp_path / "out" / f"rank{rank}.json").read_text()) == alone_facts
    assert alone_facts["tied"]  # the example ties lm_head to the embeddings: rank 1 kept the tie
    assert any("inv_freq" in k for k in alone)  # a non-persistent buffer (not in the file) was sent too
    with pytest.raises(OSError):  # rank 1's folder holds no weights: it could not have loaded them itself
        build_model(tiny_config(tmp_path / "alone", [f"model.path={other}"]))


def test_a_failed_load_on_rank_0_fails_every_rank_instead_of_leaving_them_waiting(tmp_path):
    missing = tmp_path / "missing"
    proc = _launch(missing, missing, tmp_path / "out")
    assert proc.returncode != 0
    assert "the main process could not load model.path" in proc.stdout + proc.stderr  # rank 1's error
    assert not (tmp_path / "out").exists()


def test_ddp_update_from_a_checkpoint_equals_one_process(tmp_path):
    """Through the Trainer under torchrun (DDP): rank 1 receives the checkpoint, and the update of the
    same global batch equals one process's (tests/e2e/test_distributed.py's fixed batch)."""
    model = make_example(tmp_path / "example", size="tiny", problems=16)["model"]
    extra = [f"model.path={model}", "rollout.max_new_tokens=6"]
    two = _run(["fixed"], tmp_path / "two", 2, overrides=extra)
    one = _run(["fixed"], tmp_path / "one", 1, overrides=extra)[0]
    assert two[0]["backend"] == "ddp" and one["backend"] == "single"
    assert two[0]["init"] == two[1]["init"] == one["init"]  # the same weights before the update, on every rank
    assert_same_loss(two[0]["loss"], one["loss"])
    assert _max_diff(two[0]["flat"], two[1]["flat"]) == 0.0
    assert_same_update(two[0]["flat"], one["flat"], one["init"])
