"""Per-seed training metrics of an ``rlvr compare`` folder: the mean of each named metric over a run's
logged steps (or its first / last N), for mechanism facts that results.json does not carry (e.g.
TCPO's turn scores, LURE's proposed levels).

    python benchmarks/run_metrics.py runs/compare/tcpo tcpo rollout/first_turn_score adv/hindsight_frac
    python benchmarks/run_metrics.py runs/compare/self_play lure lure/level/lure_arithmetic --last 32

Prints JSON: {"folder", "method", "window", "seeds": {seed: {metric: mean}}}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def window_means(rows: list[dict], keys: list[str], first: int, last: int) -> dict[str, float | None]:
    """Mean of each key over rows[:first] (first > 0), rows[-last:] (last > 0) or all rows."""
    part = rows[:first] if first else rows[-last:] if last else rows
    out: dict[str, float | None] = {}
    for key in keys:
        values = [float(r[key]) for r in part if r.get(key) is not None]
        out[key] = round(sum(values) / len(values), 4) if values else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("method")
    ap.add_argument("metrics", nargs="+")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--first", type=int, default=0, help="average over the first N logged steps")
    group.add_argument("--last", type=int, default=0, help="average over the last N logged steps")
    args = ap.parse_args()
    from rlvr.train.logging import read_metrics

    seeds = {}
    for run in sorted(Path(args.folder, "runs", args.method).glob("seed*")):
        if not run.name[4:].isdigit() or not (run / "metrics.jsonl").exists():
            continue  # seed<N> only: a restarted run's old folder is kept as seed<N>.archived-<time>
        rows = read_metrics(run)
        seeds[run.name[4:]] = window_means(rows, args.metrics, args.first, args.last)
    window = f"first {args.first}" if args.first else f"last {args.last}" if args.last else "all steps"
    print(json.dumps({"folder": args.folder, "method": args.method, "window": window, "seeds": seeds}))


if __name__ == "__main__":
    main()
