"""Measure what each testbed regime (configs/regimes/) is for, on its own warm start.

For every seed: warm-start the tiny model with the regime's config (as ``rlvr train`` would), then
evaluate on held-out problems with k samples and print one JSON object per regime:

* ``hard``: greedy accuracy and pass@k on the 'hard' subset (the target: pass@8 < 0.05) and on the rest;
* ``confident``: maj@k (the share of problems whose group majority is right; target >= 0.6), greedy;
* ``mixed_pool``: over the fixed training pool, the share of problems the warm start solves in none,
  some or all of k samples (informative = some);
* ``long``: mean sampled and greedy completion lengths, greedy accuracy, pass@k and maj@k
  (the demonstrations' lengths are checked in tests/unit/tasks/test_regimes.py).

    python benchmarks/regimes.py --regime hard --seeds 0 1 --threads 1
    python benchmarks/regimes.py --regime hard --set task.params.hard_digits=5   # a variant of the regime
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from rlvr.eval import evaluate
from rlvr.train.build import build_task
from rlvr.train.config import load_config
from rlvr.train.run import heldout, warm_start_model

REGIMES = ("hard", "confident", "mixed_pool", "long")
ROOT = Path(__file__).resolve().parents[1]


def measure(regime: str, seed: int, problems: int, k: int, overrides: tuple[str, ...] = ()) -> dict:
    cfg = load_config(ROOT / "configs" / "regimes" / f"{regime}.yaml", [*overrides, f"run.seed={seed}"])
    start = time.perf_counter()
    model, tokenizer, info = warm_start_model(cfg)
    task = build_task(cfg)
    out = {"regime": regime, **({"overrides": list(overrides)} if overrides else {}), "seed": seed,
           "warm_start_steps": info.get("warm_start_steps_done", info.get("warm_start_steps"))}
    budget = cfg.rollout.max_new_tokens
    if regime == "mixed_pool":
        pool = task.problems(task.config.pool_size, seed=0)[:problems]
        ev = evaluate(model, tokenizer, task, pool, k=k, max_new_tokens=budget, seed=seed)
        out.update(pool_problems=len(pool), greedy=ev["greedy_accuracy"], **_solve_shares(model, tokenizer,
                                                                                            task, pool, k, budget, seed))
    else:
        ev = evaluate(model, tokenizer, task, heldout(task, problems, seed), k=k, max_new_tokens=budget, seed=seed)
        keep = ("greedy_accuracy", f"pass@{k}", f"maj@{k}", "sample_length", "greedy_length")
        out.update({key: v for key, v in ev.items() if key.startswith(keep)})
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def _solve_shares(model, tokenizer, task, pool, k, budget, seed) -> dict:
    """Share of pool problems solved by none, some or all of k samples."""
    from rlvr.models import format_prompt
    from rlvr.rollout import generate
    from rlvr.tasks import verify_all
    rows = [p for p in pool for _ in range(k)]
    gen = generate(model, tokenizer, [format_prompt(tokenizer, p.prompt) for p in rows], max_new_tokens=budget,
                   seed=seed)
    scores = [s.value for s in verify_all(task, rows, gen.texts)]
    solved = [sum(scores[i * k:(i + 1) * k]) for i in range(len(pool))]
    n = len(pool)
    return {"solved_none": sum(c == 0 for c in solved) / n, "solved_some": sum(0 < c < k for c in solved) / n,
            "solved_all": sum(c == k for c in solved) / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regime", choices=REGIMES, nargs="+", default=list(REGIMES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override on top of the regime's file (repeatable)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for regime in args.regime:
        for seed in args.seeds:
            print(json.dumps(measure(regime, seed, args.problems, args.k, tuple(args.overrides))), flush=True)


if __name__ == "__main__":
    main()
