"""Credit-assignment methods against GRPO on the arithmetic testbed, as a thin config over `rlvr compare`.

Runs GRPO and each credit-assignment preset for the same number of steps and seeds (one shared
warm start per seed), then prints JSON: per method, held-out greedy accuracy (before, after) and
pass@k, mean ± 95 % CI across seeds, read from the comparison's results.json.

    python benchmarks/credit_methods.py --steps 100 --seeds 0 1 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

METHODS = ["grpo", "std_dial", "length_power", "sa_mrpo", "fade", "mmpo", "d_grpo", "taco", "cliff", "answer_mask"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--out", default="runs/compare/credit_methods")
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    presets = root / "configs" / "methods"
    methods = [m for m in args.methods if (presets / f"{m}.yaml").exists()]
    spec = {
        "out_dir": args.out,
        "base": {"task": {"name": "arithmetic"},
                 "warm_start": {"steps": 400, "target_accuracy": 0.2, "max_steps": 1000},
                 "run": {"eval_every": 50, "eval_problems": 200, "eval_k": 8, "save_every": 100}},
        "methods": {m: {"preset": m} for m in methods},
        "seeds": args.seeds,
        "budget": {"steps": args.steps},
        "jobs": args.jobs,
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    config = Path(args.out) / "credit_methods.yaml"
    config.write_text(yaml.safe_dump(spec, sort_keys=False))
    code = subprocess.run([sys.executable, "-m", "rlvr", "compare", str(config)], cwd=root).returncode
    results = json.loads((Path(args.out) / "results.json").read_text())
    out = {"budget": results["budget"], "seeds": args.seeds, "skipped": sorted(set(args.methods) - set(methods)),
           "exit_code": code, "methods": {}}
    for method, stats in results["methods"].items():
        out["methods"][method] = {k: v for k, v in stats.items()
                                  if k.startswith(("accuracy", "pass", "maj", "final_reward"))}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
