"""Verification cost per completion: ``verify_all``'s default against a run's pool and in-process.

``--n`` (256) GSM8K-style completions (worked reasoning ending in an answer: right, wrong, in other
notations -- ``\\boxed{}``, ``$...$``, ``1,234``, ``72.0``, ``\\frac{144}{2}`` -- or with no answer at
all) are scored for the dataset task's default verifier, ``math_verify``, these ways (ms per completion):

* ``default``: ``rlvr.tasks.verify_all(task, problems, texts)`` with nothing open, as a library
  user calls it: ``first_call`` opens the shared pool (its start-up included), ``later_call`` reuses it.
* ``pool``: ``verify_all`` in a ``VerifierPool`` of ``--workers`` processes (default: one per core),
  as a run verifies: ``warm`` (workers started and the task loaded) and ``cold`` (start-up included).
* ``in_process``: the math-verify check called directly, one after another, with no guard at all.
* ``serial``: ``verify_all`` inside ``verifier_pool(0)`` (``rollout.verify_workers=0``): one call at a
  time, each forking a child killed at the limit -- the library path before the shared pool.
* ``arithmetic_us_per_call``: the bounded testbed check (``needs_timeout = False``) in-process against
  forced through the pool: why such tasks keep verifying in-process.

Prints one JSON object, with ``agreement`` (fraction of verdicts equal to the serial path's) and the
1-minute load average before and after (other work on the machine slows every figure).

    python benchmarks/verify_speed.py --n 256            # ~40 s on 2 cores
    python benchmarks/verify_speed.py --n 256 --serial-n 64
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
    p.add_argument("--n", type=int, default=256, help="completions to verify")
    p.add_argument("--workers", type=int, default=-1, help="pool workers (-1: one per core)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats of each warm path (the median is reported)")
    p.add_argument("--serial-n", type=int, default=128, help="completions timed on the slow serial path")
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
    from rlvr.tasks import verify_all
    from rlvr.sandbox.pool import VerifierPool, verifier_pool
    from rlvr.sandbox.verify import _verify_op, shared_pool
    from rlvr.types import Problem

    load_before = os.getloadavg()[0]
    prompts, golds, texts = gsm8k_like(args.n, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "gsm8k_like.jsonl"
        data.write_text("".join(json.dumps({"prompt": p, "answer": g}) + "\n" for p, g in zip(prompts, golds)))
        task = build("task", "dataset", path=str(data))
        problems = [Problem(p, g) for p, g in zip(prompts, golds)]
        first_s, default = timed(lambda: verify_all(task, problems, texts, args.timeout), 1)  # nothing open yet
        later_s, _ = timed(lambda: verify_all(task, problems, texts, args.timeout), args.repeats)
        default_pool = shared_pool(create=False)
        start_method = default_pool._workers[0].proc._popen.method if default_pool._workers else None
        start = time.perf_counter()
        with VerifierPool(args.workers) as pool:
            cold = verify_all(task, problems, texts, args.timeout, pool=pool)
            cold_s = time.perf_counter() - start
            warm_s, warm = timed(lambda: verify_all(task, problems, texts, args.timeout, pool=pool), args.repeats)
            arith = _arithmetic(build, pool, args.repeats, _verify_op)
        workers = pool.size
        task.verify(problems[0], texts[0])  # build the verifier here
        check = task._verifier.check
        local_s, local = timed(lambda: [check(p, t) for p, t in zip(problems, texts)], args.repeats)
        m = min(args.serial_n, args.n)
        with verifier_pool(0):
            serial_s, serial = timed(lambda: verify_all(task, problems[:m], texts[:m], args.timeout), 1)

    def ms(seconds: float, n: int = args.n) -> float:
        return round(1e3 * seconds / n, 2)

    def agree(scores: list) -> float:
        return sum(a.value == b.value for a, b in zip(scores, serial)) / len(serial)

    print(json.dumps({
        "completions": args.n, "workers": workers, "cores": os.cpu_count(), "timeout_s": args.timeout,
        "ms_per_completion": {
            "default": {"first_call": ms(first_s), "later_call": ms(later_s), "start_method": start_method},
            "pool": {"warm": ms(warm_s), "cold": ms(cold_s)},
            "in_process": ms(local_s), "serial": ms(serial_s, m), "serial_completions": m},
        "agreement": {"default": agree(default), "pool_warm": agree(warm), "pool_cold": agree(cold),
                      "in_process": agree(local)},
        "accuracy": sum(s.value for s in default) / args.n,
        "errors": {"default": sum(bool(s.meta.get("error")) for s in default),
                   "pool": sum(bool(s.meta.get("error")) for s in warm)},
        "arithmetic_us_per_call": arith,
        "loadavg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }, indent=2))


def _arithmetic(build, pool, repeats: int, op) -> dict[str, float]:
    """Microseconds per call of the bounded arithmetic check, in-process vs through the pool."""
    from rlvr.tasks import verify_all

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
