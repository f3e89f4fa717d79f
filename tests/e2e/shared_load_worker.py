"""Worker for tests/e2e/test_shared_load.py: ``torchrun --nproc_per_node 2 -m tests.e2e.shared_load_worker
MODEL OTHER OUT``. Rank 0 builds the policy from ``MODEL``; every other rank from ``OTHER``, a copy of the
folder without its weight file, with every loader it could read weights through replaced by one that
raises. Each rank writes every tensor it holds (tied and non-persistent ones too) to
``OUT/rank<r>.safetensors`` and what else the test compares to ``OUT/rank<r>.json``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from rlvr.train.build import build_model
from rlvr.train.sharding import finish_distributed, make_accelerator
from tests.helpers.tiny import tiny_config


def _refuse(*args: object, **kwargs: object) -> None:
    raise AssertionError("a rank other than 0 tried to read the checkpoint")


def _forbid_loading() -> None:
    """Every way this process could read a checkpoint's weights raises."""
    import safetensors
    import safetensors.torch
    import transformers
    import transformers.modeling_utils

    import rlvr.models
    rlvr.models.load_model = _refuse
    transformers.AutoModelForCausalLM.from_pretrained = _refuse
    safetensors.safe_open = safetensors.torch.load_file = _refuse
    transformers.modeling_utils.safe_open = _refuse
    torch.load = _refuse


def held_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer under every name (tied weights twice), as separate contiguous copies."""
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return {name: t.detach().clone().contiguous() for name, t in named}


def facts(model: torch.nn.Module) -> dict:
    """What besides the tensors must match: ties, mode, class, generation config, the random state after."""
    return {"tied": model.get_output_embeddings().weight is model.get_input_embeddings().weight,
            "training": model.training, "class": type(model).__name__,
            "generation": model.generation_config.to_diff_dict(), "rng": torch.rand(3).tolist()}


def main(model_dir: str, other_dir: str, out: str) -> None:
    acc = make_accelerator()
    rank = acc.process_index
    if rank != 0:
        _forbid_loading()
    cfg = tiny_config(Path(out) / "run", [f"model.path={model_dir if rank == 0 else other_dir}"])
    torch.manual_seed(cfg.run.training_seed)  # as the Trainer does before building
    model, _ = build_model(cfg, acc)
    Path(out).mkdir(parents=True, exist_ok=True)
    save_file(held_tensors(model), str(Path(out) / f"rank{rank}.safetensors"))
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(facts(model)))


if __name__ == "__main__":
    main(*sys.argv[1:4])
    finish_distributed()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # as tests/e2e/ddp_worker.py: no interpreter teardown after the barrier
