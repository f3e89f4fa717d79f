"""``rlvr quickstart`` on several seeds: held-out greedy accuracy before and after RL, and seconds.

Each seed runs ``python -m rlvr.cli quickstart --seed S`` in its own process (``--jobs`` at a
time, each with ``run.threads`` set to ``--threads``), into ``<out>/seed<S>``, and its
``summary.json`` is read back. One JSON object per seed goes to stdout as it finishes, then a
last object with the minimum and maximum gain and the slowest run:

    python benchmarks/quickstart_seeds.py --seeds 0-9 --jobs 2 --threads 1 --out runs/qs_seeds
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def parse_seeds(text: str) -> list[int]:
    """``"0-9"``, ``"0,3,11"`` or a mix (``"0-2,11"``) as a list of seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return seeds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0-9", help="seeds, e.g. 0-9 or 0,3,11")
    p.add_argument("--jobs", type=int, default=1, help="quickstarts running at once")
    p.add_argument("--threads", type=int, default=2, help="torch threads per quickstart (run.threads)")
    p.add_argument("--out", default="runs/quickstart_seeds", help="parent folder of the seed<S> run folders")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides passed to every quickstart")
    return p.parse_args(argv)


def run_seed(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out) / f"seed{seed}"
    cmd = [sys.executable, "-m", "rlvr.cli", "quickstart", "--seed", str(seed), "--out", str(out), "--overwrite",
           f"run.threads={args.threads}", *args.overrides]
    log = Path(args.out) / f"seed{seed}.log"  # a file, not a pipe: the run outlives this script if it dies
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as sink:
        code = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "TQDM_DISABLE": "1"}).returncode
    wall = time.perf_counter() - start
    if code != 0:
        return {"seed": seed, "error": f"exit {code}; see {log}"}
    s = json.loads((out / "summary.json").read_text())
    return {"seed": seed, "before": s["accuracy_before"], "after": s["accuracy_after"],
            "gain": round(s["accuracy_after"] - s["accuracy_before"], 4), "seconds": round(s["seconds"], 1),
            "wall_seconds": round(wall, 1), "warm_start_steps": s.get("warm_start_steps"),
            "load_average": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for row in pool.map(lambda s: run_seed(s, args), parse_seeds(args.seeds)):
            print(json.dumps(row), flush=True)
            results.append(row)
    ok = [r for r in results if "gain" in r]
    if ok:
        print(json.dumps({"seeds": len(results), "failed": len(results) - len(ok),
                          "min_gain": min(r["gain"] for r in ok), "max_gain": max(r["gain"] for r in ok),
                          "max_seconds": max(r["seconds"] for r in ok)}), flush=True)
    return 0 if len(ok) == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
