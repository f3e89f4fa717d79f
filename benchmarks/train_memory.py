"""Resident memory of ``rlvr train`` step after step on a real model (issue 46):

    python benchmarks/train_memory.py MODEL_PATH [--steps 25] [--prompts 8] [--group 4] [--max-new-tokens 32]
        [--precision bf16] [--unbounded] [-- extra overrides]

Runs GRPO on reasoning-gym's basic_arithmetic (last-number answers, no warm start, one thread) in a
subprocess and prints JSON: the ``memory/rss_mb`` and ``memory/heap_in_use_mb`` series every step logs
(glibc keeps freed heap pages resident, so RSS moves in jumps that the heap in use does not show), and
their mean growth per step after step 10 (MiB). ``--unbounded`` gives oneDNN's per-shape caches their
default 1024 entries (rlvr.train.memory bounds them) to show what the bound prevents. Needs the
reasoning-gym extra.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rlvr.train.memory import KERNEL_CACHE_VARIABLES

SETTLED = 10  # steps before the growth is measured (first shapes, optimizer state, allocator warm-up)


def overrides(args: argparse.Namespace, out_dir: str) -> list[str]:
    return [f"model.path={args.model}", "task.name=reasoning_gym", "task.params.dataset=basic_arithmetic",
            "task.params.answer_format=last_number", "warm_start.steps=0", "run.threads=1",
            f"rollout.prompts_per_step={args.prompts}", f"rollout.group_size={args.group}",
            f"rollout.max_new_tokens={args.max_new_tokens}", f"run.mixed_precision='{args.precision}'",
            f"run.steps={args.steps}", "run.eval_every=0", "run.save_every=0", "run.eval_problems=4",
            f"run.out_dir={out_dir}", *args.extra]


def growth_per_step(series: list[float]) -> float | None:
    """Mean MiB added per step after step ``SETTLED`` (None for a shorter run)."""
    tail = series[SETTLED - 1:]
    return (tail[-1] - tail[0]) / (len(tail) - 1) if len(tail) > 1 else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--precision", default="bf16", choices=["bf16", "no"])
    ap.add_argument("--unbounded", action="store_true", help="oneDNN's default 1024-entry caches")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if args.unbounded:
        env.update({name: "1024" for name in KERNEL_CACHE_VARIABLES})  # oneDNN's and ideep's defaults
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        subprocess.run([sys.executable, "-m", "rlvr", "train", "configs/methods/grpo.yaml",
                        *overrides(args, str(run))], env=env, check=True, cwd=Path(__file__).parents[1],
                       stdout=subprocess.DEVNULL)
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    series = {name: [r[f"memory/{name}"] for r in rows if f"memory/{name}" in r]
              for name in ("rss_mb", "heap_in_use_mb")}
    step_s = sorted(r["time/elapsed"] - p["time/elapsed"] for p, r in zip(rows, rows[1:]))
    print(json.dumps({**series, "growth_mb_per_step_after_10": {k: growth_per_step(v) for k, v in series.items()},
                      "median_step_s": step_s[len(step_s) // 2] if step_s else None,
                      "unbounded": args.unbounded, "steps": args.steps}))


if __name__ == "__main__":
    main()
