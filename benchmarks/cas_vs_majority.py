"""CAS (confidence-based adaptive sampling, docs/methods.md §2.28) against majority voting at equal budgets.

On the testbed: the tiny model warm-started on arithmetic as in the quickstart (at least 400
supervised steps, on until 20 % validation accuracy), ``--problems`` held-out problems, a pool of
``--pool`` samples per problem at temperature 1. Both procedures read the same pool in order, so
they are compared on the same samples: CAS takes sample 1, stops if confident, else takes more up
to ``max_extra``; majority voting gets exactly CAS's total number of samples
(``rlvr.eval.cas.equal_budget``: ⌊S/P⌋ or ⌊S/P⌋ + 1 per problem). The tiny model states no
confidence, so CAS uses ``confidence: sequence`` (exp of the mean token log-prob); a C3RL-trained
model would use its stated confidence (``rlvr eval --strategy cas --confidence stated``).
Prints JSON: per CAS setting, its accuracy and mean samples next to majority voting's accuracy at
the same budget, plus the majority-vote curve maj@1..pool.

    python benchmarks/cas_vs_majority.py            # ~2-3 minutes on 1 thread
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--pool", type=int, default=8, help="samples per problem (CAS budget max_extra + 1 <= pool)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tau-stop", type=float, nargs="+", default=[0.8, 0.9, 0.95])
    ap.add_argument("--tau-vote", type=float, nargs="+", default=[0.6, 0.8])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()

    from rlvr.eval.cas import CASConfig, equal_budget, majority_correct, run_cas, sample_answers, summarize
    from rlvr.train.config import load_config
    from rlvr.train.run import heldout, warm_start_model

    cfg = load_config(None, [f"run.seed={args.seed}", f"run.threads={args.threads}"],
                      base={"warm_start": {"steps": 400, "target_accuracy": 0.2, "max_steps": 1000}})
    model, tokenizer, info = warm_start_model(cfg)
    model.eval()
    from rlvr.train.build import build_task
    task = build_task(cfg)
    problems = heldout(task, args.problems, args.seed)
    k = args.pool
    flat, _, _ = sample_answers(model, tokenizer, task, [p for p in problems for _ in range(k)], confidence="sequence",
                                missing_confidence=0.0, max_new_tokens=cfg.rollout.max_new_tokens,
                                temperature=cfg.rollout.temperature, seed=args.seed)
    pool = [flat[i * k:(i + 1) * k] for i in range(len(problems))]

    def draw(indices: list[int], round_: int) -> list:
        return [pool[i][round_] for i in indices]

    settings = []
    for tau_stop in args.tau_stop:
        for tau_vote in args.tau_vote:
            cas = CASConfig(tau_stop=tau_stop, tau_vote=tau_vote, max_extra=k - 1, confidence="sequence")
            outcomes = run_cas(draw, len(problems), cas)
            budgets = equal_budget(sum(o.num_samples for o in outcomes), len(problems))
            majority = [majority_correct(pool[i][:n]) for i, n in enumerate(budgets)]
            settings.append({"tau_stop": tau_stop, "tau_vote": tau_vote, "max_extra": k - 1,
                             **{key: round(v, 4) for key, v in summarize(outcomes, majority).items()}})
    curve = {f"maj@{j}": round(sum(majority_correct(s[:j]) for s in pool) / len(pool), 4) for j in range(1, k + 1)}
    conf = torch.tensor([s.confidence for row in pool for s in row])
    print(json.dumps({"problems": len(problems), "pool": k, "seed": args.seed, "threads": args.threads,
                      "warm_start_steps": info.get("warm_start_steps"),
                      "confidence_source": "sequence (exp mean token log-prob)",
                      "confidence_quantiles": {q: round(conf.quantile(q).item(), 4) for q in (0.1, 0.5, 0.9)},
                      "sample_accuracy": round(sum(s.correct for row in pool for s in row) / conf.numel(), 4),
                      "cas": settings, "majority_curve": curve,
                      "seconds": round(time.perf_counter() - start, 1)}, indent=1))


if __name__ == "__main__":
    main()
