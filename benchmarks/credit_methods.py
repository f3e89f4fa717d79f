"""Credit-assignment methods against GRPO on the arithmetic testbed, as a thin config over `rlvr compare`.

Runs GRPO and each credit-assignment preset for the same number of steps and seeds (one shared
warm start per seed), then prints JSON: per method, held-out greedy accuracy (before, after) and
pass@k, mean ± 95 % CI across seeds, read from the comparison's results.json.

    python benchmarks/credit_methods.py --steps 100 --seeds 0 1 --jobs 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from compare_driver import ROOT, compare_spec, read_results, run_compare, write_spec

METHODS = ["grpo", "std_dial", "length_power", "sa_mrpo", "fade", "mmpo", "d_grpo", "taco", "cliff", "answer_mask"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--out", default="runs/compare/credit_methods")
    args = ap.parse_args()
    presets = ROOT / "configs" / "methods"
    methods = [m for m in args.methods if (presets / f"{m}.yaml").exists()]
    spec = compare_spec(args.out, {m: {"preset": m} for m in methods}, args.seeds, {"steps": args.steps}, args.jobs,
                        run={"eval_every": 50, "eval_problems": 200, "eval_k": 8, "save_every": 100})
    code = run_compare(write_spec(spec, Path(args.out), "credit_methods"))
    results = read_results(Path(args.out))
    out = {"budget": results["budget"], "seeds": args.seeds, "skipped": sorted(set(args.methods) - set(methods)),
           "exit_code": code, "methods": {}}
    for method, stats in results["methods"].items():
        out["methods"][method] = {k: v for k, v in stats.items()
                                  if k.startswith(("accuracy", "pass", "maj", "final_reward"))}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
