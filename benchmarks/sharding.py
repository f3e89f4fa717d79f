"""Per-rank memory and step time of DDP against FSDP2, 2 gloo processes on this CPU.

The real-architecture example (``rlvr.models.real``, default size 30m, a random Qwen2 model with its
BPE tokenizer and word problems, written once to a temporary folder) trains ``--steps`` GRPO steps
under each backend: DDP through ``torchrun``, FSDP2 through ``accelerate launch --config_file
configs/accelerate/fsdp2_cpu.yaml``. Every rank reports the bytes it holds of the parameters (local
shards under FSDP2), of the gradients (measured just before each optimizer step) and of the AdamW
state, its peak resident memory (``ru_maxrss``) and the seconds per step (the mean over steps after
the first). Prints one JSON object; ``fsdp2_over_ddp`` compares rank 0's parameter + optimizer bytes
(the target: ≤ 0.6 with 2 ranks).

    nice -n 10 python benchmarks/sharding.py --size 30m --steps 3
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

import torch

ROOT = Path(__file__).resolve().parents[1]
FSDP2 = ROOT / "configs" / "accelerate" / "fsdp2_cpu.yaml"
EXAMPLE = ROOT / "configs" / "examples" / "qwen2_grpo.yaml"


def _local_bytes(tensors) -> int:
    """Bytes this rank holds of ``tensors`` (the local shard of a DTensor)."""
    total = 0
    for t in tensors:
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


def worker(out: Path, overrides: list[str]) -> None:
    """One rank: train, measure, write ``out/rank<r>.json``."""
    from rlvr.train.config import load_config
    from rlvr.train.trainer import Trainer
    cfg = load_config(str(EXAMPLE), overrides)
    trainer = Trainer(cfg)
    grads: list[int] = []
    step_optimizer = trainer.updater.optimizer_step

    def measured_step() -> dict:  # gradient bytes just before the step consumes them
        grads.append(_local_bytes(p.grad for p in trainer.model.parameters() if p.grad is not None))
        return step_optimizer()

    trainer.updater.optimizer_step = measured_step
    times = []
    with trainer.sharding.lockstep():
        trainer._write_run_files()
        for _ in range(cfg.run.steps):
            start = time.perf_counter()
            trainer.train_step()
            times.append(time.perf_counter() - start)
    optim = [v for state in trainer.optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    result = {"backend": trainer.sharding.name, "rank": trainer.acc.process_index,
              "param_bytes": _local_bytes(trainer.model.parameters()),
              "grad_bytes": max(grads), "optimizer_bytes": _local_bytes(optim),
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
              "seconds_per_step": sum(times[1:]) / max(len(times) - 1, 1), "step_seconds": times}
    (out / f"rank{trainer.acc.process_index}.json").write_text(json.dumps(result))


def launch(backend: str, out: Path, overrides: list[str], port: int) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")] if p)}
    script = [str(Path(__file__).resolve()), "--worker", str(out), "--", *overrides]
    if backend == "fsdp2":
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(FSDP2),
               "--num_processes", "2", "--main_process_port", str(port), *script]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
               *script]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{backend} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="30m")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step (global)")
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(Path(args.worker), args.overrides)
        return
    from rlvr.models.real import make_example
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_example(Path(tmp) / "example", size=args.size, problems=200)
        load = os.getloadavg()[0]
        results = {}
        for i, backend in enumerate(("ddp", "fsdp2")):
            overrides = [f"model.path={paths['model']}", f"task.params.path={paths['data']}",
                         f"run.out_dir={Path(tmp) / backend / 'run'}", f"run.steps={args.steps}",
                         f"rollout.prompts_per_step={args.prompts}", f"rollout.group_size={args.group}",
                         f"rollout.max_new_tokens={args.max_new_tokens}", "run.threads=1"]
            results[backend] = launch(backend, Path(tmp) / backend, overrides, 29600 + os.getpid() % 500 + i)
    ddp, fsdp = results["ddp"][0], results["fsdp2"][0]
    ratio = (fsdp["param_bytes"] + fsdp["optimizer_bytes"]) / (ddp["param_bytes"] + ddp["optimizer_bytes"])
    print(json.dumps({"size": args.size, "ranks": 2, "steps": args.steps, "load_average_before": load,
                      "load_average_after": os.getloadavg()[0], "ddp": results["ddp"], "fsdp2": results["fsdp2"],
                      "fsdp2_over_ddp": {"param_plus_optimizer_bytes": ratio,
                                         "grad_bytes": fsdp["grad_bytes"] / ddp["grad_bytes"],
                                         "peak_rss": fsdp["peak_rss_bytes"] / ddp["peak_rss_bytes"],
                                         "seconds_per_step": fsdp["seconds_per_step"] / ddp["seconds_per_step"]}},
                     indent=2))


if __name__ == "__main__":
    main()
