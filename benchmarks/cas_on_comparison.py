"""C3RL's second claim on the calibration comparison's trained models: CAS with *stated* confidences
against majority voting at the same number of samples (docs/methods.md §2.28).

For every finished run of the given methods in an ``rlvr compare`` output folder, evaluates
``<run>/final`` as ``rlvr eval --strategy cas --confidence stated`` does (``evaluate_path``; held-out
problems, a pool of ``--k`` samples per problem) and prints one JSON line per run, then per method the paired difference
CAS − majority accuracy over seeds (mean, 95 % t half-width, sign-flip p, W/T/L) and CAS's mean samples.

    python benchmarks/cas_on_comparison.py runs/compare/calibration   # ~2 minutes on 1 thread
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

KEYS = ("cas/accuracy", "cas/mean_samples", "majority/accuracy", "cas/stop_confident", "cas/stop_vote",
        "cas/stop_budget", "calibration/brier", "calibration/ece")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="an rlvr compare output folder (runs/<method>/seed<N>/final)")
    ap.add_argument("--methods", nargs="+", default=["c3rl", "grpo"])
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--tau-stop", type=float, default=0.9)
    ap.add_argument("--tau-vote", type=float, default=0.8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from rlvr.compare.stats import paired_difference
    from rlvr.train.run import evaluate_path

    cas = {"tau_stop": args.tau_stop, "tau_vote": args.tau_vote, "confidence": "stated", "max_extra": args.k - 1}

    rows = []
    for method in args.methods:
        for final in sorted(Path(args.folder, "runs", method).glob("seed*/final")):
            out = evaluate_path(str(final), problems=args.problems, k=args.k, strategy="cas", cas=cas)
            row = {"method": method, "seed": int(final.parent.name[4:]), **{k: out[k] for k in KEYS}}
            rows.append(row)
            print(json.dumps(row), flush=True)
    for method in args.methods:
        mine = [r for r in rows if r["method"] == method]
        diff = paired_difference({r["seed"]: r["cas/accuracy"] for r in mine},
                                 {r["seed"]: r["majority/accuracy"] for r in mine})
        print(json.dumps({"method": method, "cas_minus_majority": {k: diff[k] for k in
                                                                   ("n", "mean", "ci", "p", "wins", "ties", "losses")},
                          "cas_mean_samples": sum(r["cas/mean_samples"] for r in mine) / max(len(mine), 1),
                          "pool": args.k}))


if __name__ == "__main__":
    main()
