"""Per-rank peak resident memory and build time when every rank reads ``model.path`` against rank 0
reading it and the others receiving its tensors (``rlvr.train.shared_load``), 2 gloo processes on CPU.

One rank's view, launched twice by ``main`` (``torchrun --nproc_per_node 2``): build the ``Trainer`` on
the example checkpoint (``rlvr.models.real``, default size 100m, written once to a temporary folder),
then run one DDP update of tests/e2e/ddp_worker.py's ``fixed`` batch. ``each`` replaces
``load_shared`` with a plain ``load()`` on every rank (the previous behaviour). Prints one JSON line
per rank and setting: peak resident memory (``ru_maxrss``) after building and after the update, the
seconds to build, and the loss (the same in both settings).

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/shared_load.py --size 100m
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _peak_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def rank(model_dir: str, how: str, out: str) -> None:
    """One rank: build the Trainer (``each``: every rank loads the file), one update, one JSON line."""
    import rlvr.train.shared_load as shared_load
    if how == "each":
        shared_load.load_shared = lambda acc, load: load()
    from rlvr.train.sharding import finish_distributed
    from rlvr.train.trainer import Trainer
    from tests.e2e.ddp_worker import MODES, run_fixed
    from tests.helpers.tiny import tiny_config
    cfg = tiny_config(out, [*MODES["fixed"], f"model.path={model_dir}", "rollout.max_new_tokens=6"])
    start = time.perf_counter()
    trainer = Trainer(cfg)
    built, seconds = _peak_mb(), round(time.perf_counter() - start, 2)
    loss = run_fixed(trainer)["loss"]
    print(json.dumps({"rank": trainer.acc.process_index, "how": how, "peak_after_build_mb": built,
                      "build_s": seconds, "peak_after_update_mb": _peak_mb(), "loss": loss}), flush=True)
    finish_distributed()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="100m")
    parser.add_argument("--port", type=int, default=29747)
    args = parser.parse_args()
    from rlvr.models.real import make_example
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    with tempfile.TemporaryDirectory() as tmp:
        model = make_example(Path(tmp) / "example", size=args.size, problems=64)["model"]
        for how in ("each", "shared"):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                   str(args.port), str(Path(__file__).resolve()), "--rank", model, how, str(Path(tmp) / how)]
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
            lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
            print("\n".join(lines) if lines else proc.stderr[-2000:], flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank(*sys.argv[2:5])
    else:
        main()
