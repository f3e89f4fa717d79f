"""The accelerate files under configs/accelerate leave precision to rlvr's ``run.mixed_precision``.

With ``mixed_precision: bf16`` in an FSDP file, accelerate (1.15, 1.16) builds a ``MixedPrecisionPolicy``
with bf16 ``param_dtype`` and ``reduce_dtype`` for ``fully_shard``: parameters gathered and gradients
reduced in bf16 even under ``run.mixed_precision=no``, and "2 CPU ranks equal 1 process"
(tests/e2e/test_fsdp2.py, on the CPU twin) would say nothing about the GPU file. So every file says
``'no'``, and the GPU file and its CPU twin agree on every precision key and on the whole FSDP block."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "accelerate"
PRECISION_WORDS = ("precision", "dtype", "bf16", "fp16", "fp8", "upcast", "downcast")


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((CONFIGS / name).read_text())


def precision_keys(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every key (dotted path) whose name speaks of precision, with its value."""
    found: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            found.update(precision_keys(value, path + "."))
        elif any(word in key.lower() for word in PRECISION_WORDS):
            found[path] = value
    return found


def test_the_fsdp2_gpu_file_and_its_cpu_twin_agree_on_precision_and_sharding():
    gpu, cpu = _load("fsdp2.yaml"), _load("fsdp2_cpu.yaml")
    assert precision_keys(gpu) == precision_keys(cpu)
    assert "mixed_precision" in precision_keys(gpu)
    assert gpu["fsdp_config"] == cpu["fsdp_config"]
    assert gpu["distributed_type"] == cpu["distributed_type"] == "FSDP"


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_accelerate_file_leaves_precision_to_rlvr(name):
    assert _load(name)["mixed_precision"] == "no", f"{name}: rlvr's run.mixed_precision sets the precision"


def test_precision_keys_finds_nested_keys():
    tree = {"mixed_precision": "no", "fsdp_config": {"fsdp_param_dtype": "bf16", "fsdp_version": 2}}
    assert precision_keys(tree) == {"mixed_precision": "no", "fsdp_config.fsdp_param_dtype": "bf16"}


def test_the_scaling_doc_states_what_the_fsdp2_files_set():
    """docs/scaling.md's FSDP2 paragraph names both files, quotes the precision they set, and (that being
    'no', precision left to rlvr) says parameters, gradients and AdamW state stay float32."""
    text = " ".join((CONFIGS.parents[1] / "docs" / "scaling.md").read_text().split())
    fsdp2 = text[text.index("**Sharded training (FSDP2).**"):text.index("**DeepSpeed ZeRO-2/3.**")]
    assert "configs/accelerate/fsdp2.yaml" in fsdp2 and "configs/accelerate/fsdp2_cpu.yaml" in fsdp2
    stated = set(re.findall(r"accelerate's `mixed_precision: '?(\w+)'?`", fsdp2))
    assert stated == {_load("fsdp2.yaml")["mixed_precision"], _load("fsdp2_cpu.yaml")["mixed_precision"]} == {"no"}
    assert "parameters, gradients and AdamW state staying float32" in fsdp2
