"""Label-free RLVR (TTRL, OM-GRPO, Hi-TTRL) against gold-label GRPO on the arithmetic testbed (`rlvr compare`).

Every method trains for the same number of steps from one shared warm start per seed. The
label-free presets never read a gold answer for their reward; gold GRPO runs with the metrics-only
``consensus`` shaper so all four log the same diagnostics. Prints JSON: per method, held-out greedy
accuracy (before, after) and pass@k (mean ± 95 % CI across seeds, from the comparison's
results.json) and, read from each run's metrics.jsonl and averaged over seeds, curves over each
fifth of training of

* ``answer_entropy``: mean entropy (nats) of a group's answer distribution — the collapse diagnostic;
* ``consensus``: mean share of the majority answer in a group;
* ``label_accuracy``: share of groups whose majority answer is right (the pseudo-label's quality);
* ``train_gold_accuracy``: the gold accuracy of the training rollouts (``reward/mean``, pre-shaping).

``entropy_ratio`` is the last fifth's answer entropy over the first fifth's; ``collapsed`` is true
when that ratio is at most 0.5 while held-out accuracy fell (agreement grew, correctness did not: the policy converged on
answers, not on right answers).

    python benchmarks/label_free.py --steps 60 --seeds 0 --jobs 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from compare_driver import compare_spec, metric_curve, read_results, run_compare, seed_mean, write_spec

METHODS = {
    "grpo_gold": {"preset": "grpo", "overrides": ["algorithm.shapers=[{name: consensus}]"]},
    "ttrl": {"preset": "ttrl"},
    "om_grpo": {"preset": "om_grpo"},
    "hi_ttrl": {"preset": "hi_ttrl"},
}
CURVES = {"answer_entropy": "reward/answer_entropy", "consensus": "reward/consensus",
          "label_accuracy": "reward/label_accuracy", "train_gold_accuracy": "reward/mean"}
KS = (1, 4)


def summarise(out_dir: Path, method: str, stats: dict, seeds: list[int]) -> dict:
    keep = {k: v for k, v in stats.items() if k.startswith("accuracy") or k in {f"pass@{k}" for k in KS}}
    for name, key in CURVES.items():
        keep[name] = seed_mean([metric_curve(out_dir / "runs" / method / f"seed{s}", key, 5, missing_ok=True)
                                for s in seeds])
    ent, gain = keep["answer_entropy"], stats.get("accuracy_gain", {}).get("mean")
    keep["entropy_ratio"] = round(ent[-1] / ent[0], 3) if ent and ent[0] > 0 else None
    keep["collapsed"] = bool(ent and gain is not None and ent[-1] <= 0.5 * ent[0] and gain < 0)
    return keep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--eval-problems", type=int, default=200)
    ap.add_argument("--warm-target", type=float, default=0.2,
                    help="warm-start greedy accuracy target; majority voting needs maj@k > pass@1 to help")
    ap.add_argument("--out", default="runs/compare/label_free")
    args = ap.parse_args()
    spec = compare_spec(args.out, {m: METHODS[m] for m in args.methods}, args.seeds, {"steps": args.steps}, args.jobs,
                        run={"eval_every": 0, "eval_problems": args.eval_problems, "eval_k": max(KS), "save_every": 0},
                        warm_target=args.warm_target)
    out_dir = Path(args.out)
    code = run_compare(write_spec(spec, out_dir, "label_free"))
    results = read_results(out_dir)
    out = {"budget": results["budget"], "seeds": args.seeds, "exit_code": code, "methods": {}}
    for method, stats in results["methods"].items():
        out["methods"][method] = summarise(out_dir, method, stats, args.seeds)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
