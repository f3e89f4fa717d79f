"""Worker for tests/e2e/test_deepspeed.py's ZeRO-3 gather test: ``accelerate launch --config_file
configs/accelerate/zero3.yaml --num_processes 2 -m tests.e2e.zero3_gather_worker OUT``. On the Trainer's
ZeRO-3 policy it takes the full state the previous way (``GatheredParameters`` over every parameter, then
clones) and through ``DeepSpeedSharding.model_state`` (one module at a time), counting the elements held
whole at once, and writes ``OUT/rank<r>.json``."""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
from deepspeed.runtime.zero.partition_parameters import GatheredParameters

import rlvr.train.deepspeed_backend as backend
from rlvr.train.sharding import finish_distributed
from rlvr.train.trainer import Trainer
from tests.helpers.tiny import tiny_config


def main(out: str) -> None:
    trainer = Trainer(tiny_config(Path(out) / "run", ["model.hidden=32", "model.layers=3"]))
    module, peak = trainer.policy, [0]

    @contextmanager
    def counted(params):
        with GatheredParameters(params):
            peak[0] = max(peak[0], sum(p.numel() for p in {id(p): p for p in params}.values()))
            yield

    with counted(list(module.parameters())):  # the previous code
        old = {k: v.detach().clone().cpu() for k, v in module.state_dict().items()}
    old_peak, peak[0] = peak[0], 0
    backend_gather = sys.modules["deepspeed.runtime.zero.partition_parameters"].GatheredParameters
    sys.modules["deepspeed.runtime.zero.partition_parameters"].GatheredParameters = counted
    try:
        new = trainer.sharding.model_state(module)
    finally:
        sys.modules["deepspeed.runtime.zero.partition_parameters"].GatheredParameters = backend_gather
    largest = max(sum(p.ds_numel for p in m.parameters(recurse=False)) for m in module.modules())
    result = {"backend": trainer.sharding.name, "old_peak": old_peak, "new_peak": peak[0], "largest": largest,
              "total": sum(p.ds_numel for p in module.parameters()), "keys": list(new),
              "old_keys": list(old), "equal": all(torch.equal(new[k], old[k]) for k in new),
              "on_host": all(t.device.type == "cpu" for t in new.values()),
              "whole_after": sum(p.numel() for p in module.parameters())}
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank{trainer.acc.process_index}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
    finish_distributed()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
