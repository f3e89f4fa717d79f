"""The seed runs of a recipe side by side (issue 46: configs/examples/smollm2_reasoning_gym.yaml):

    python benchmarks/recipe_report.py RUN [RUN ...] [--plot docs/results/smollm2_recipe/curve.png]
        [--wall SECONDS ...]

Reads each run folder's ``summary.json`` and ``metrics.jsonl`` and prints one JSON object: per run the
seed, held-out greedy accuracy before and after (and on how many problems), the gain, the share of
well-formed replies before and after, the RL seconds the run recorded, and its resident memory series
(``memory/rss_mb`` and ``memory/heap_in_use_mb``) with the mean growth per step after step 10
(``train_memory.growth_per_step``); then the smallest gain over the runs. ``--wall`` adds each run's
whole wall-clock time (both evaluations included) as measured outside (``/usr/bin/time``), in order.
``--plot`` writes the sampled training reward per step and the accuracy before → after for each run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from train_memory import growth_per_step

from rlvr.train.config import read_yaml


def run_record(folder: Path) -> dict[str, Any]:
    """One run's figures, from its own files."""
    summary = json.loads((folder / "summary.json").read_text())
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "reward/mean" in r]
    before, after = summary["eval_before"], summary["eval_after"]
    rss = [r["memory/rss_mb"] for r in steps if "memory/rss_mb" in r]
    heap = [r["memory/heap_in_use_mb"] for r in steps if "memory/heap_in_use_mb" in r]
    return {"run": str(folder), "seed": read_yaml(folder / "config.yaml").get("run", {}).get("seed"),
            "steps": summary["steps"],
            "problems": after["num_problems"], "accuracy_before": before["greedy_accuracy"],
            "accuracy_after": after["greedy_accuracy"], "gain_points": round(100 * summary["accuracy_gain"], 1),
            "well_formed_before": before.get("greedy_well_formed"), "well_formed_after": after.get("greedy_well_formed"),
            "rl_seconds": round(summary["seconds"], 1), "reward": [r["reward/mean"] for r in steps],
            "rss_mb": rss, "rss_growth_mb_per_step_after_10": growth_per_step(rss),
            "heap_mb": heap, "heap_growth_mb_per_step_after_10": growth_per_step(heap)}


def plot(records: list[dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for rec in records:
        line, = left.plot(range(1, len(rec["reward"]) + 1), rec["reward"], alpha=0.8, label=f"seed {rec['seed']}")
        right.plot([0, rec["steps"]], [rec["accuracy_before"], rec["accuracy_after"]], "o-", color=line.get_color(),
                   label=f"seed {rec['seed']}: {rec['accuracy_before']:.3f} → {rec['accuracy_after']:.3f}")
    left.set(title="sampled training reward (8 prompts x 8)", xlabel="step", ylabel="reward/mean")
    right.set(title=f"held-out greedy accuracy ({records[0]['problems']} problems)", xlabel="step",
              ylabel="greedy accuracy", ylim=(0, 1))
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument("--wall", type=float, nargs="*", default=None, help="each run's wall seconds, in order")
    args = ap.parse_args()
    records = [run_record(folder) for folder in args.runs]
    if args.wall is not None:
        if len(args.wall) != len(records):
            raise SystemExit(f"--wall: {len(args.wall)} values for {len(records)} runs")
        for rec, seconds in zip(records, args.wall):
            rec["wall_minutes"] = round(seconds / 60, 1)
    if args.plot is not None:
        plot(records, args.plot)
    print(json.dumps({"runs": records, "smallest_gain_points": min(r["gain_points"] for r in records)}))


if __name__ == "__main__":
    main()
