"""Numbers of a transfer pilot (configs/transfer/smollm2_pilot.yaml): what sizes its family's seeds and steps.

Reads each finished run of an ``rlvr compare`` folder (RUN/summary.json, RUN/eval_outcomes.jsonl) and prints JSON:
per run its accuracy before and after, gain, updates and (given ``--cpu``) CPU-minutes; the baseline's gains
(mean, SD); per other method its paired differences from the baseline by seed, their SD where two or more seeds
are paired, and each seed's evaluation-noise standard error (from the problems only one of the two got right);
and the power rule of rlvr.compare.power applied to an SD: the MDE at 80 % power at α/m (m = ``--claims``, Holm's
strictest step) for 2-16 seeds and the seeds a 3-point MDE needs.

    python benchmarks/transfer_pilot.py runs/transfer/smollm2_pilot --claims 5 \\
        --cpu grpo:900=10.2 grpo:901=10.4 > docs/results/transfer/smollm2_pilot/pilot.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from rlvr.compare.verdict_tests import ALPHA, mde, seeds_for
from rlvr.eval.outcomes import read_outcomes


def _runs(folder: Path) -> dict[tuple[str, int], dict]:
    out = {}
    for summary in sorted(folder.glob("runs/*/seed*/summary.json")):
        run = summary.parent
        data = json.loads(summary.read_text())
        rows = read_outcomes(run) or []
        out[(run.parent.name, int(run.name[4:]))] = {
            "accuracy_before": data.get("accuracy_before"), "accuracy_after": data.get("accuracy_after"),
            "gain": data.get("accuracy_gain"), "updates": data.get("steps"), "rollouts": data.get("rollouts"),
            "rl_seconds_wall": round(data.get("seconds", 0.0), 1),
            "greedy": {r["id"]: r["greedy"] for r in rows}}
    return out


def eval_se(ours: dict, theirs: dict) -> float | None:
    """Evaluation-noise SE of one seed's accuracy difference: the discordant problems' variance over n."""
    ids = [i for i in ours if i in theirs]
    if not ids:
        return None
    d = [float(ours[i]) - float(theirs[i]) for i in ids]
    mean = sum(d) / len(d)
    return math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d))


def power(sd: float | None, m: int, target: float = 0.03) -> dict:
    if not sd:
        return {}
    strict = ALPHA / m
    return {"sd": round(sd, 4), "alpha_over_m": strict, "seeds_for_mde_3pt": seeds_for(sd, target, strict),
            "mde_at_alpha_over_m": {n: round(mde(sd, n, strict), 4) for n in range(2, 17)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--baseline", default="grpo")
    ap.add_argument("--claims", type=int, default=5, help="m: the claims of the family's Holm family")
    ap.add_argument("--cpu", nargs="*", default=[], help="METHOD:SEED=CPU-minutes of each run (measured outside)")
    args = ap.parse_args()
    runs = _runs(Path(args.folder))
    for item in args.cpu:
        key, minutes = item.split("=")
        method, seed = key.split(":")
        if (method, int(seed)) in runs:
            runs[(method, int(seed))]["cpu_minutes"] = float(minutes)
    base = {s: r for (m, s), r in runs.items() if m == args.baseline}
    gains = [r["gain"] for r in base.values() if r["gain"] is not None]
    out = {"folder": args.folder, "baseline": args.baseline,
           "runs": [{"method": m, "seed": s, **{k: v for k, v in r.items() if k != "greedy"}}
                    for (m, s), r in sorted(runs.items())],
           "baseline_gain": {"n": len(gains), "mean": round(statistics.mean(gains), 4) if gains else None,
                             "sd": round(statistics.stdev(gains), 4) if len(gains) > 1 else None},
           "paired": {}}
    for method in sorted({m for m, _ in runs} - {args.baseline}):
        seeds = sorted(s for m, s in runs if m == method and s in base)
        diffs = [runs[(method, s)]["accuracy_after"] - base[s]["accuracy_after"] for s in seeds]
        ses = [eval_se(runs[(method, s)]["greedy"], base[s]["greedy"]) for s in seeds]
        sd = statistics.stdev(diffs) if len(diffs) > 1 else None
        out["paired"][method] = {"seeds": seeds, "diffs": [round(d, 4) for d in diffs],
                                 "eval_se": [None if x is None else round(x, 4) for x in ses],
                                 "sd": None if sd is None else round(sd, 4), "power": power(sd, args.claims)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
