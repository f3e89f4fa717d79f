"""Wall-clock overhead of GAR (docs/methods.md §2.1) over the same GRPO step on the testbed.

Two trainers share everything but the preset: ``configs/methods/grpo.yaml`` and
``configs/methods/gar.yaml`` (plain sampler keeping the output layer's inputs while decoding, GAR
shaper). Before every timed step both are reset to the same warm-started weights, a fresh AdamW
state and the same step index, so they sample the very same completions (hidden-state capture does
not change sampling) and differ only in GAR's work: the capture hook, one teacher-forced forward of
each prompt's expert solution, and the output-layer signatures. The steps run in alternating order
(A B, B A, ...) so drift in machine load hits both; the medians of ``--steps`` timed steps after
``--warmup`` are compared. Paper: < 9 % overhead; target < 5 %.

    python benchmarks/gar_overhead.py                 # ~2-3 minutes on 1 thread
    python benchmarks/gar_overhead.py --steps 6 --warmup 1 --sft-steps 150   # quick
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

PRESETS = Path(__file__).resolve().parents[1] / "configs" / "methods"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=12, help="timed steps per preset")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per preset first")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (B)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--sft-steps", type=int, default=400,
                   help="warm-start steps (passing rollouts are what GAR works on)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    from rlvr.train.config import load_config
    from rlvr.train.run import warm_start_model
    from rlvr.train.trainer import Trainer

    overrides = [f"run.seed={args.seed}", f"run.threads={args.threads}", f"rollout.prompts_per_step={args.prompts}",
                 f"rollout.group_size={args.group}", f"rollout.max_new_tokens={args.max_new_tokens}",
                 f"warm_start.steps={args.sft_steps}", "warm_start.target_accuracy=0", "run.eval_every=0",
                 "run.save_every=0"]
    start = time.perf_counter()
    model, tokenizer, _ = warm_start_model(load_config(None, overrides))
    init = copy.deepcopy(model.state_dict())
    out_dir = Path(tempfile.mkdtemp(prefix="gar_overhead_"))
    trainers = {name: Trainer(load_config(str(PRESETS / f"{name}.yaml"), overrides + [f"run.out_dir={out_dir / name}"]),
                              model=copy.deepcopy(model), tokenizer=tokenizer) for name in ("grpo", "gar")}
    times: dict[str, list[float]] = {"grpo": [], "gar": []}
    phases: dict[str, list[dict[str, float]]] = {"grpo": [], "gar": []}
    for r in range(args.warmup + args.steps):
        for name in (("grpo", "gar") if r % 2 == 0 else ("gar", "grpo")):
            t = trainers[name]
            t.policy.load_state_dict(init)
            t.optimizer.state.clear()
            t.step = r
            t0 = time.perf_counter()
            metrics, _ = t.train_step()
            if r >= args.warmup:
                times[name].append(time.perf_counter() - t0)
                phases[name].append(metrics)
    print(json.dumps(report(args, times, phases, time.perf_counter() - start), indent=2))


def report(args: argparse.Namespace, times: dict, phases: dict, seconds: float) -> dict:
    med = {k: statistics.median(v) for k, v in times.items()}

    def phase(name: str, key: str) -> float:
        return round(statistics.median(m.get(key, 0.0) for m in phases[name]), 5)

    same = all(a["rollout/response_length"] == b["rollout/response_length"]
               for a, b in zip(phases["grpo"], phases["gar"]))
    return {
        "benchmark": "gar_overhead",
        "settings": {"prompts": args.prompts, "group": args.group, "max_new_tokens": args.max_new_tokens,
                     "steps": args.steps, "warmup": args.warmup, "sft_steps": args.sft_steps, "threads": args.threads},
        "grpo_step_s": round(med["grpo"], 4),
        "gar_step_s": round(med["gar"], 4),
        "overhead_pct": round(100 * (med["gar"] - med["grpo"]) / med["grpo"], 2),
        "paper_overhead_pct": "< 9", "target_overhead_pct": "< 5",
        "phases_s": {name: {"rollout": phase(name, "timing/rollout"), "shape": phase(name, "timing/shape")}
                     for name in times},
        "gar_passing_frac": phase("gar", "reward/gar_passing"),
        "gar_anchor_forwards_per_step": phase("gar", "reward/gar_anchor_forwards"),
        "gar_mean_cosine": phase("gar", "reward/gar_cosine"),
        "same_completions": same,
        "total_seconds": round(seconds, 1),
    }


if __name__ == "__main__":
    main()
