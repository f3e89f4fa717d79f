"""Worker for the ES data-parallel test; run as ``torchrun --nproc_per_node 2 -m tests.e2e.es_worker OUT``
or as a plain single process. Trains a few ES steps on the tiny config, writes ``OUT/rank<r>.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from rlvr.train.run import make_trainer
from tests.helpers.tiny import tiny_config

# Sampled fitness (temperature 1, 2 samples) scored by toy_coin_test (a hash of the text, the same on
# every rank: members whose samples differ get different fitness, whatever the model); an odd population
# so the ranks' shares differ (rank 0 scores members 0, 2, 4; rank 1 members 1, 3).
ES_OVERRIDES = ["task.name=toy_coin_test",
                "optim.name=es", "optim.params.population=5", "optim.params.prompts=3", "optim.params.sigma=0.05",
                "optim.params.alpha=0.05", "optim.params.temperature=1.0", "optim.params.samples_per_prompt=2",
                "run.steps=2"]


def main(out: str) -> None:
    cfg = tiny_config(Path(out) / "run", ES_OVERRIDES)
    trainer = make_trainer(cfg)
    summary = trainer.train()
    flat = torch.cat([p.detach().flatten() for p in trainer.policy.parameters()])
    rows = [json.loads(x) for x in (Path(out) / "run" / "metrics.jsonl").read_text().splitlines()] \
        if trainer.acc.is_main_process else []
    result = {"world": trainer.acc.num_processes, "summary": summary, "flat": flat.tolist(), "metrics": rows}
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank{trainer.acc.process_index}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
