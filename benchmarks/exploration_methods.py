"""Exploration and trust-region methods against GRPO on the arithmetic testbed (`rlvr compare`).

GRPO, UP, RIPO, OC-GRPO, ARMOR and outer (weak-model) prefixes train for the same number of steps
and seeds from one shared warm start per seed. Prints JSON: per method, held-out greedy accuracy
and pass@k for k = 1, 2, 4, 8, 16 (n = 16 samples per problem; mean ± 95 % CI across seeds), and
the policy entropy of the sampled tokens over training (mean over each tenth of the run, averaged
over seeds) read from each run's metrics.jsonl.

    python benchmarks/exploration_methods.py --steps 100 --seeds 0 1 --jobs 1
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from compare_driver import ROOT, compare_spec, metric_curve, read_results, run_compare, seed_mean, write_spec

METHODS = ["grpo", "up", "ripo", "oc_grpo", "armor", "outer_prefix"]
# A shared warm start hands every run a model folder, from which outer_prefix's "warm_start:F" weak model
# (a shorter warm start) cannot be rebuilt: the frozen starting policy is named as the weak model instead.
OVERRIDES = {"outer_prefix": ["rollout.sampler.params.weak_model=reference"]}
KS = (1, 2, 4, 8, 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--out", default="runs/compare/exploration_methods")
    args = ap.parse_args()
    methods = [m for m in args.methods if (ROOT / "configs" / "methods" / f"{m}.yaml").exists()]
    spec = compare_spec(args.out, {m: {"preset": m, "overrides": OVERRIDES.get(m, [])} for m in methods}, args.seeds, {"steps": args.steps}, args.jobs,
                        run={"eval_every": 0, "eval_problems": 200, "eval_k": max(KS), "save_every": 100})
    out_dir = Path(args.out)
    code = run_compare(write_spec(spec, out_dir, "exploration_methods"))
    results = read_results(out_dir)
    out = {"budget": results["budget"], "seeds": args.seeds, "exit_code": code, "methods": {}}
    for method, stats in results["methods"].items():
        keep = {k: v for k, v in stats.items()
                if k.startswith("accuracy") or k in {f"pass@{k}" for k in KS}}
        # mean rollout/entropy over each tenth of a run's steps, averaged over the seeds that logged it
        entropy = seed_mean([metric_curve(out_dir / "runs" / method / f"seed{s}", "rollout/entropy", 10)
                             for s in args.seeds])
        if entropy:
            keep["entropy_by_tenth"] = entropy
        out["methods"][method] = keep
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
