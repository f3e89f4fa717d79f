"""GRPO (G = 8) against BPCO (G = 1, a learned critic) at an equal number of sampled responses.

A thin config over `rlvr compare` on the arithmetic testbed (one shared warm start per seed, a
rollout budget equal for every run; both methods sample 64 responses a step: GRPO 8 prompts x 8,
BPCO 64 prompts x 1). Prints JSON: per method, held-out greedy accuracy (before, after), pass@k,
RL seconds, and, for critic methods, the critic's value explained variance over the last 10 % of
steps (1 = perfect, 0 = no better than a constant), mean ± 95 % CI across seeds.

    python benchmarks/critic_methods.py                     # default: ~6 min on 2 CPU cores
    python benchmarks/critic_methods.py --rollouts 12800 --seeds 0 1 2 --methods grpo bpco bpco_privileged
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from compare_driver import compare_spec, read_results, run_compare, write_spec

METHODS = ["grpo", "bpco"]
GROUP = {"grpo": ["rollout.group_size=8", "rollout.prompts_per_step=8"]}  # presets with G > 1; others keep their own


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=64 * 60, help="sampled responses per run (equal for all)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--eval-problems", type=int, default=200)
    ap.add_argument("--out", default="runs/compare/critic_methods")
    args = ap.parse_args()
    spec = compare_spec(args.out, {m: {"preset": m, "overrides": GROUP.get(m, [])} for m in args.methods},
                        args.seeds, {"rollouts": args.rollouts}, args.jobs,
                        run={"eval_every": 0, "eval_problems": args.eval_problems, "eval_k": 4, "save_every": 0,
                             "threads": 1}, warm_steps=300, warm_max_steps=800)
    config = write_spec(spec, Path(args.out), "critic_methods")
    start = time.perf_counter()
    code = run_compare(config)
    results = read_results(Path(args.out))
    out = {"budget": results["budget"], "seeds": args.seeds, "exit_code": code,
           "wall_seconds": round(time.perf_counter() - start, 1), "methods": {}}
    for method, stats in results["methods"].items():
        keep = {k: v for k, v in stats.items() if k.startswith(("accuracy", "pass", "final_reward", "seconds",
                                                                "rollouts", "steps"))}
        keep["value_explained_var"] = _explained_variance(Path(args.out), method, args.seeds)
        out["methods"][method] = keep
    print(json.dumps(out, indent=1))


def _explained_variance(out: Path, method: str, seeds: list[int]) -> dict | None:
    """Mean ± CI over seeds of the critic's explained variance, averaged over each run's last 10 % of steps."""
    from rlvr.compare.report import final_mean
    from rlvr.compare.stats import mean_ci
    from rlvr.train.logging import read_metrics
    values = []
    for seed in seeds:
        run = out / "runs" / method / f"seed{seed}"
        if (run / "metrics.jsonl").exists():
            values.append(final_mean(read_metrics(run), "critic/explained_var"))
    return mean_ci(values) if any(v is not None for v in values) else None


if __name__ == "__main__":
    main()
