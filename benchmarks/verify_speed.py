"""Verification throughput: the verifier pool against the serial path the collector took before it.

512 GSM8K-style completions (worked reasoning ending in an answer: right, wrong, in other notations
-- ``\\boxed{}``, ``$...$``, ``1,234``, ``72.0``, ``\\frac{144}{2}`` -- or with no answer at all)
are scored for the dataset task's default verifier, ``math_verify``, three ways:

* ``serial``: ``verify_all`` with no pool (``rollout.verify_workers: 0``) -- the path the collector
  took for the dataset task before the pool: one call after another, each forking a child of the
  calling process that is killed at the limit (``isolation: process``).
* ``pool``: ``verify_all`` in a ``VerifierPool`` of ``--workers`` processes (default: one per core),
  timed warm (workers started and the task loaded: the steady state of a run) and cold (start-up
  included: what the first step of a run pays once).
* ``arithmetic``: the bounded testbed check (``needs_timeout = False``) in-process against forced
  through the pool, per call: why such tasks keep verifying in-process.

Prints one JSON object: completions/s and seconds for each path, ``speedup`` (pool warm over
serial), ``agreement`` (fraction of identical verdicts) and the 1-minute load average before and
after (other work on the machine slows every figure).

    python benchmarks/verify_speed.py                 # ~1 minute on 2 cores
    python benchmarks/verify_speed.py --n 128 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=512, help="completions to verify")
    p.add_argument("--workers", type=int, default=-1, help="pool workers (-1: one per core)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats of each path (the median is reported)")
    p.add_argument("--timeout", type=float, default=5.0, help="time limit of one call, seconds")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


_NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis"]
_ITEMS = ["clips", "apples", "pages", "marbles", "cookies", "stamps"]


def gsm8k_like(n: int, seed: int) -> tuple[list[str], list[str], list[str]]:
    """``n`` (prompt, gold, completion) triples: about 55 % right (in five notations), 30 % wrong,
    15 % with no final answer."""
    rng = random.Random(seed)
    prompts, golds, texts = [], [], []
    for _ in range(n):
        who, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        a, b, c = rng.randint(12, 480), rng.randint(2, 9), rng.randint(3, 60)
        gold = a * b - c
        prompt = f"{who} has {a} {item} in each of {b} boxes and gives away {c}. How many {item} are left?"
        steps = (f"{who} has {b} boxes with {a} {item} each, so {a} * {b} = {a * b} {item}. "
                 f"After giving away {c}, {a * b} - {c} = {gold}.")
        roll = rng.random()
        if roll < 0.55:
            answer = rng.choice([f"The answer is {gold}.", f"\\boxed{{{gold}}}", f"So the answer is ${gold}$.",
                                 f"#### {gold:,}", f"Final answer: {gold}.0", f"$\\frac{{{2 * gold}}}{{2}}$"])
        elif roll < 0.85:
            answer = f"The answer is \\boxed{{{gold + rng.choice([-c, c, 1, -1, a])}}}."
        else:
            steps, answer = steps[: rng.randint(20, 80)], rng.choice(["I am not sure.", "", "Let me think again"])
        prompts.append(prompt)
        golds.append(str(gold))
        texts.append(f"{steps} {answer}".strip())
    return prompts, golds, texts


def timed(fn, repeats: int) -> tuple[float, list]:
    """Median seconds of ``repeats`` calls and the last result."""
    seconds, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), out


def main() -> None:
    args = parse_args()
    from rlvr.registry import build
    from rlvr.tasks.pool import VerifierPool
    from rlvr.tasks.safe import _verify_op, verify_all
    from rlvr.types import Problem

    load_before = os.getloadavg()[0]
    prompts, golds, texts = gsm8k_like(args.n, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "gsm8k_like.jsonl"
        data.write_text("".join(json.dumps({"prompt": p, "answer": g}) + "\n" for p, g in zip(prompts, golds)))
        task = build("task", "dataset", path=str(data))
        problems = [Problem(p, g) for p, g in zip(prompts, golds)]
        serial_s, serial = timed(lambda: verify_all(task, problems, texts, args.timeout), args.repeats)
        start = time.perf_counter()
        pool = VerifierPool(args.workers)
        with pool:
            cold = verify_all(task, problems, texts, args.timeout, pool=pool)
            cold_s = time.perf_counter() - start
            warm_s, warm = timed(lambda: verify_all(task, problems, texts, args.timeout, pool=pool), args.repeats)
            arith = _arithmetic(build, pool, args.repeats, _verify_op)
        workers = pool.size
    agree = sum(a.value == b.value for a, b in zip(serial, warm)) / args.n
    print(json.dumps({
        "completions": args.n, "workers": workers, "cores": os.cpu_count(), "timeout_s": args.timeout,
        "serial": {"seconds": round(serial_s, 3), "per_s": round(args.n / serial_s, 1)},
        "pool_warm": {"seconds": round(warm_s, 3), "per_s": round(args.n / warm_s, 1)},
        "pool_cold": {"seconds": round(cold_s, 3), "per_s": round(args.n / cold_s, 1)},
        "speedup": round(serial_s / warm_s, 2), "speedup_cold": round(serial_s / cold_s, 2),
        "agreement": agree, "agreement_cold": sum(a.value == b.value for a, b in zip(serial, cold)) / args.n,
        "accuracy": sum(s.value for s in warm) / args.n,
        "errors": {"serial": sum(bool(s.meta.get("error")) for s in serial),
                   "pool": sum(bool(s.meta.get("error")) for s in warm)},
        "arithmetic_us_per_call": arith,
        "loadavg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }, indent=2))


def _arithmetic(build, pool, repeats: int, op) -> dict[str, float]:
    """Microseconds per call of the bounded arithmetic check, in-process vs through the pool."""
    from rlvr.tasks.safe import verify_all

    task = build("task", "arithmetic")
    problems = task.problems(256, seed=0)
    texts = [p.solution for p in problems]
    local_s, _ = timed(lambda: verify_all(task, problems, texts), repeats)
    calls = [(op, ("bench", "arithmetic"), task, (p, t)) for p, t in zip(problems, texts)]
    pool.run(calls[:pool.size * 2], 5.0)  # load the task in the workers first
    pooled_s, _ = timed(lambda: pool.run(calls, 5.0), repeats)
    return {"in_process": round(1e6 * local_s / len(texts), 1), "pool": round(1e6 * pooled_s / len(texts), 1)}


if __name__ == "__main__":
    main()
