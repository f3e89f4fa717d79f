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
import subprocess
import sys
from pathlib import Path

import yaml

METHODS = ["grpo", "up", "ripo", "oc_grpo", "armor", "outer_prefix"]
KS = (1, 2, 4, 8, 16)


def entropy_curve(run_dir: Path, pieces: int = 10) -> list[float]:
    """Mean ``rollout/entropy`` over each of ``pieces`` equal spans of a run's steps."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    values = [r["rollout/entropy"] for r in rows if "rollout/entropy" in r]
    if not values:
        return []
    size = max(len(values) // pieces, 1)
    return [sum(values[i:i + size]) / len(values[i:i + size]) for i in range(0, len(values), size)][:pieces]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--out", default="runs/compare/exploration_methods")
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    methods = [m for m in args.methods if (root / "configs" / "methods" / f"{m}.yaml").exists()]
    spec = {
        "out_dir": args.out,
        "base": {"task": {"name": "arithmetic"},
                 "warm_start": {"steps": 400, "target_accuracy": 0.2, "max_steps": 1000},
                 "run": {"eval_every": 0, "eval_problems": 200, "eval_k": max(KS), "save_every": 100}},
        "methods": {m: {"preset": m} for m in methods},
        "seeds": args.seeds,
        "budget": {"steps": args.steps},
        "jobs": args.jobs,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = out_dir / "exploration_methods.yaml"
    config.write_text(yaml.safe_dump(spec, sort_keys=False))
    code = subprocess.run([sys.executable, "-m", "rlvr", "compare", str(config)], cwd=root).returncode
    results = json.loads((out_dir / "results.json").read_text())
    out = {"budget": results["budget"], "seeds": args.seeds, "exit_code": code, "methods": {}}
    for method, stats in results["methods"].items():
        keep = {k: v for k, v in stats.items()
                if k.startswith("accuracy") or k in {f"pass@{k}" for k in KS}}
        curves = [entropy_curve(out_dir / "runs" / method / f"seed{s}") for s in args.seeds]
        curves = [c for c in curves if c]
        if curves:
            n = min(len(c) for c in curves)
            keep["entropy_by_tenth"] = [round(sum(c[i] for c in curves) / len(curves), 4) for i in range(n)]
        out["methods"][method] = keep
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
