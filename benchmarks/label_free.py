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
import subprocess
import sys
from pathlib import Path

import yaml

METHODS = {
    "grpo_gold": {"preset": "grpo", "overrides": ["algorithm.shapers=[{name: consensus}]"]},
    "ttrl": {"preset": "ttrl"},
    "om_grpo": {"preset": "om_grpo"},
    "hi_ttrl": {"preset": "hi_ttrl"},
}
CURVES = {"answer_entropy": "reward/answer_entropy", "consensus": "reward/consensus",
          "label_accuracy": "reward/label_accuracy", "train_gold_accuracy": "reward/mean"}
KS = (1, 4)


def curve(run_dir: Path, key: str, pieces: int = 5) -> list[float]:
    """Mean of metric ``key`` over each of ``pieces`` equal spans of a run's steps."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    values = [r[key] for r in rows if key in r]
    if not values:
        return []
    size = max(len(values) // pieces, 1)
    return [sum(values[i:i + size]) / len(values[i:i + size]) for i in range(0, len(values), size)][:pieces]


def seed_mean(curves: list[list[float]]) -> list[float]:
    curves = [c for c in curves if c]
    if not curves:
        return []
    n = min(len(c) for c in curves)
    return [round(sum(c[i] for c in curves) / len(curves), 4) for i in range(n)]


def summarise(out_dir: Path, method: str, stats: dict, seeds: list[int]) -> dict:
    keep = {k: v for k, v in stats.items() if k.startswith("accuracy") or k in {f"pass@{k}" for k in KS}}
    for name, key in CURVES.items():
        keep[name] = seed_mean([curve(out_dir / "runs" / method / f"seed{s}", key) for s in seeds])
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
    root = Path(__file__).resolve().parents[1]
    spec = {
        "out_dir": args.out,
        "base": {"task": {"name": "arithmetic"},
                 "warm_start": {"steps": 400, "target_accuracy": args.warm_target, "max_steps": 1000},
                 "run": {"eval_every": 0, "eval_problems": args.eval_problems, "eval_k": max(KS), "save_every": 0}},
        "methods": {m: METHODS[m] for m in args.methods},
        "seeds": args.seeds,
        "budget": {"steps": args.steps},
        "jobs": args.jobs,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = out_dir / "label_free.yaml"
    config.write_text(yaml.safe_dump(spec, sort_keys=False))
    code = subprocess.run([sys.executable, "-m", "rlvr", "compare", str(config)], cwd=root).returncode
    results = json.loads((out_dir / "results.json").read_text())
    out = {"budget": results["budget"], "seeds": args.seeds, "exit_code": code, "methods": {}}
    for method, stats in results["methods"].items():
        out["methods"][method] = summarise(out_dir, method, stats, args.seeds)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
