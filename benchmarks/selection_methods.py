"""Prompt-selection methods on the arithmetic testbed by held-out accuracy against rollouts spent (`rlvr compare`).

Uniform selection (GRPO), DAPO dynamic sampling (GRPO + refill rounds + the zero_std filter),
the CVPO curriculum selector and KGPS train from one shared warm start per seed under an equal
budget of sampled completions (refills count). Everything but the selection is GRPO. Prints JSON:
per method, held-out greedy accuracy before/after (mean ± 95 % CI across seeds), the greedy-accuracy
curve against rollouts spent (from the periodic evaluations), its mean over the evaluation points,
and rollouts-to-accuracy: the completions spent when held-out accuracy first reached the target
(default: what uniform selection reached at the end of its budget, per seed; null = never).

    python benchmarks/selection_methods.py --rollouts 3200 --seeds 0 --jobs 1
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
import yaml
from compare_driver import ROOT, compare_spec, metric_rows, read_results, run_compare, write_spec

METHODS = {
    "uniform": {"preset": "grpo"},
    "dynamic_sampling": {"preset": "grpo", "overrides": ["rollout.refill_rounds=3",
                                                         "algorithm.filters=[{name: zero_std}]"]},
    "curriculum": {"preset": "grpo", "overrides": ["algorithm.selector={name: curriculum, ema_decay: 0.8, "
                                                   "p_star: 0.5, tau: 0.25, pool_factor: 4}"]},
    "kgps": {"preset": "kgps"},
}


def accuracy_curve(run_dir: Path, before: float | None) -> list[tuple[int, float]]:
    """[(rollouts spent, held-out greedy accuracy)] from the run's periodic evaluations (0 = before RL)."""
    rows = metric_rows(run_dir)
    curve = [(0, before)] if before is not None else []
    return curve + [(int(r["rollout/spent"]), float(r["eval/accuracy"])) for r in rows if "eval/accuracy" in r]


def rollouts_to(curve: list[tuple[int, float]], target: float | None) -> int | None:
    """The rollouts spent at the first evaluation whose accuracy reached ``target`` (None: never)."""
    if target is None:
        return None
    return next((spent for spent, acc in curve if acc >= target - 1e-9), None)


def main() -> None:
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=3200, help="sampled completions per run (equal budget)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=10, help="steps between greedy held-out evaluations")
    ap.add_argument("--eval-problems", type=int, default=100)
    ap.add_argument("--target", type=float, default=None, help="accuracy for rollouts-to-accuracy "
                                                                 "(default: uniform's final accuracy, per seed)")
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--out", default="runs/compare/selection_methods")
    ap.add_argument("--warm-from", default="runs/compare/baselines",
                    help="a comparison folder whose warm starts to reuse when their setup is identical "
                         "(the warm start is most of a short run's time); '' = always build")
    args = ap.parse_args()
    out_dir = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    spec = compare_spec(str(out_dir), {m: METHODS[m] for m in args.methods}, args.seeds, {"rollouts": args.rollouts},
                        args.jobs, run={"eval_every": args.eval_every, "eval_problems": args.eval_problems,
                                        "eval_k": 4, "save_every": 0, "threads": 1})
    config = write_spec(spec, out_dir, "selection_methods")
    if args.warm_from:
        reuse_warm_starts(ROOT / args.warm_from, out_dir, spec["base"], args.seeds)
    code = run_compare(config, quiet=True)
    print(json.dumps(summarise(ROOT, out_dir, args, code), indent=1))


def reuse_warm_starts(source: Path, out_dir: Path, base: dict, seeds: list[int]) -> list[int]:
    """Copy ``source``'s warm-started model of each seed whose warm-start setup (model, task,
    warm_start, rollout, seed) equals this comparison's; ``rlvr compare`` then skips building it."""
    from rlvr.train.config import load_config, merge, to_dict
    copied = []
    for seed in seeds:
        src, dst = source / "warm" / f"seed{seed}", out_dir / "warm" / f"seed{seed}"
        spec = source / "configs" / f"warm_seed{seed}.yaml"
        if dst.exists() or not (src / "config.json").exists() or not spec.exists():
            continue
        theirs = yaml.safe_load(spec.read_text())
        ours = to_dict(load_config(None, base=merge(base, {"run": {"seed": seed}})))
        shared = set(theirs.get("rollout", {})) & set(ours["rollout"])  # fields added since then: defaults
        same_rollout = all(theirs["rollout"][k] == ours["rollout"][k] for k in shared)
        if same_rollout and all(theirs.get(k) == ours.get(k) for k in ("model", "task", "warm_start")) \
                and theirs["run"]["seed"] == seed:
            shutil.copytree(src, dst)
            copied.append(seed)
    return copied


def summarise(root: Path, out_dir: Path, args: argparse.Namespace, code: int) -> dict:
    results = read_results(out_dir)
    runs = {(r["method"], r["seed"]): r for r in results.get("runs", []) if r.get("status") == "done"}
    curves = {key: accuracy_curve(root / r["run_dir"], r.get("accuracy_before")) for key, r in runs.items()}
    out = {"budget": results["budget"], "seeds": args.seeds, "exit_code": code, "methods": {}}
    for method in args.methods:
        stats = results["methods"].get(method, {})
        entry = {k: v for k, v in stats.items() if k.startswith("accuracy") or k in ("rollouts", "steps")}
        per_seed = {}
        for seed in args.seeds:
            curve = curves.get((method, seed))
            if not curve:
                continue
            base = curves.get(("uniform", seed))
            target = args.target if args.target is not None else (base[-1][1] if base else None)
            per_seed[seed] = {"curve": curve, "target": target, "rollouts_to_target": rollouts_to(curve, target),
                              "mean_accuracy_over_evals": sum(a for _, a in curve[1:]) / max(len(curve) - 1, 1)}
        entry["per_seed"] = per_seed
        out["methods"][method] = entry
    return out


if __name__ == "__main__":
    main()
