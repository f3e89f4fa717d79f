"""FSDP2 through accelerate (``fully_shard``, ``fsdp_version: 2``) with 2 gloo processes on CPU, launched
with ``accelerate launch --config_file configs/accelerate/fsdp2_cpu.yaml``, on the Qwen2-architecture
example with its BPE tokenizer: the sharded update equals the 1-process update of the same global batch
(full fine-tune and LoRA); a run stopped after step 1 and resumed equals the uninterrupted run (lock-step
generation, sharded checkpoints gathered to rank 0, evaluations on every rank); RUN/final and
``rlvr export`` load with AutoModelForCausalLM. Generation gathers the parameters once per generate call,
not once per token, and decodes the tokens one process decodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rlvr.train.run_policy import export_run
from rlvr.models.real import make_example
from tests.e2e.test_distributed import ROOT, _max_diff, _run
from tests.helpers.tolerance import assert_same_loss, assert_same_update

FSDP2 = str(ROOT / "configs" / "accelerate" / "fsdp2_cpu.yaml")


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    return make_example(tmp_path_factory.mktemp("example"), size="tiny", problems=64)


def _real(example: dict) -> list[str]:
    """The worker's tiny config on the example checkpoint (the digit task's prompts, chat template)."""
    return [f"model.path={example['model']}", "rollout.max_new_tokens=6"]


@pytest.mark.parametrize("mode", ["fixed", "fixed_lora"])
def test_fsdp2_update_equals_single_process(tmp_path, example, mode):
    if mode == "fixed_lora":
        pytest.importorskip("peft")
    # Untrimmed micro-batches: trim_padding pads each rank's micro-batches to different widths than one
    # process's, and Adam (lr 1e-2) magnifies the float reordering past 1e-5 on near-zero LoRA gradients.
    extra = [*_real(example), "optim.trim_padding=false"]
    two = _run([mode], tmp_path / "two", 2, accelerate_config=FSDP2, overrides=extra)
    one = _run([mode], tmp_path / "one", 1, overrides=extra)[0]
    assert two[0]["backend"] == "fsdp2" and two[0]["sharded"] and one["backend"] == "single"
    assert_same_loss(two[0]["loss"], one["loss"])
    assert abs(one["loss"]) > 1e-3  # a non-trivial loss
    assert sorted(two[0]["params"]) == sorted(one["params"])  # the full model, gathered on rank 0
    assert_same_update(two[0]["flat"], one["flat"], one["init"])
    if mode == "fixed_lora":  # B starts at zero: the adapter trained
        assert any(v != 0.0 for k, v in one["params"].items() if "lora_B" in k)


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def test_fsdp2_resume_equals_uninterrupted_and_exports_load(tmp_path, example):
    """With a KL term (a frozen reference, sharded and kept in RUN/reference) and a critic (sharded too)."""
    extra = [*_real(example), "algorithm.kl_coef=0.05", "critic.enabled=true"]
    full = _run(["run"], tmp_path / "full", 2, accelerate_config=FSDP2, overrides=extra)
    assert full[0]["summary"]["steps"] == 2 and "accuracy_after" in full[0]["summary"]
    stopped = _run(["run_stop"], tmp_path / "cut", 2, accelerate_config=FSDP2, overrides=extra)
    assert stopped[0]["summary"]["steps"] == 1
    _run(["run_resume"], tmp_path / "cut", 2, accelerate_config=FSDP2, overrides=extra)
    a = _weights(tmp_path / "full" / "run" / "checkpoints" / "step_000002")
    b = _weights(tmp_path / "cut" / "run" / "checkpoints" / "step_000002")
    start = _weights(Path(example["model"]))  # save_pretrained stores the tied lm_head once
    assert a.keys() == b.keys() and set(start) <= set(a)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    assert max((a[k] - start[k]).abs().max().item() for k in start) > 1e-6  # the run trained
    critic_a = load_file(str(tmp_path / "full" / "run" / "checkpoints" / "step_000002" / "critic.safetensors"))
    critic_b = load_file(str(tmp_path / "cut" / "run" / "checkpoints" / "step_000002" / "critic.safetensors"))
    assert max((critic_a[k] - critic_b[k]).abs().max().item() for k in critic_a) < 1e-6
    assert set(start) <= set(_weights(tmp_path / "cut" / "run" / "reference"))  # the gathered reference
    # RUN/final (written after the sharded run) and `rlvr export` hold the step-2 weights and load.
    exported = Path(export_run(tmp_path / "full" / "run", tmp_path / "export")["model"])
    for folder in (tmp_path / "full" / "run" / "final", exported):
        model = AutoModelForCausalLM.from_pretrained(str(folder))
        state = model.state_dict()
        assert max((state[k] - a[k]).abs().max().item() for k in a) == 0.0


def test_fsdp2_generation_gathers_once_per_call_and_equals_one_process(tmp_path, example):
    """Greedy decoding of 12 tokens, different prompts on each rank: each rank's call all-gathers every
    parameter group once (per-token lock-step gathered each group once per forward: 12 forwards) and
    yields the tokens one process decodes for the same prompts."""
    two = _run(["generate"], tmp_path / "two", 2, accelerate_config=FSDP2, overrides=_real(example))
    one = _run(["generate"], tmp_path / "one", 1, overrides=_real(example))[0]
    groups = two[0]["param_groups"]
    assert groups >= 3  # the tiny example's blocks and the root
    for rank, result in enumerate(two):
        assert result["gathers_per_call"] == [groups], f"rank {rank}: {result['gathers_per_call']} all-gathers"
        assert result["tokens"] == [one["tokens"][rank]]
        before, after = result["reshards"]
        assert after == before and True in before  # reshard-after-forward settings put back as they were
    assert one["gathers_per_call"] == [0, 0]  # one process: nothing sharded
