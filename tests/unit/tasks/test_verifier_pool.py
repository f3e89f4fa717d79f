"""The verifier pool: parallel scores equal in-process ones; a hanging or crashing call costs only its
row (score 0 with the reason) and its worker is replaced; workers never outlive the pool; math-verify's
"Timeout is disabled" warnings stay off the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from rlvr.registry import build
from rlvr.sandbox import pool as pool_mod
from rlvr.sandbox.pool import VerifierPool, active, verifier_pool
from rlvr.tasks import verify_all
from rlvr.types import Problem, Score

pytest.importorskip("math_verify")


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting to be reaped counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def _ok(x):
    return Score(float(x))


def _sleep(x):
    time.sleep(60)


def _exit(x):
    os._exit(3)


def _segfault(x):
    import ctypes
    ctypes.string_at(0)


def _raise(x):
    raise ValueError("bad row")



def _run(pool, fns_args, timeout_s):
    """Call ``fn(arg)`` for each (fn, arg) in the pool; ops are module-level so they pickle."""
    calls = [(_apply, ("fn", fn.__name__), fn, (arg,)) for fn, arg in fns_args]
    return pool.run(calls, timeout_s)


def _apply(fn, arg):
    return fn(arg)


def _batch(n):
    problems = [Problem(f"q{i}", str(i)) for i in range(n)]
    texts = [f"so the answer is $\\boxed{{{i if i % 3 else i + 1}}}$" if i % 5 else "no idea" for i in range(n)]
    return problems, texts


@pytest.mark.slow  # over ~2 s: not in make test-fast
def test_pool_scores_equal_in_process_scores(dataset_task):
    problems, texts = _batch(24)
    serial = verify_all(dataset_task, problems, texts)
    with VerifierPool(2) as pool:
        assert active() is pool
        parallel = verify_all(dataset_task, problems, texts)
        assert len(pool.pids()) == 2 and pool.replaced == 0
    assert active() is None
    assert parallel == serial
    assert sum(s.value for s in parallel) == 13.0  # 0 < i < 24 with i % 3 != 0 and i % 5 != 0


def test_hanging_call_is_killed_and_replaced_other_rows_kept():
    with VerifierPool(2) as pool:
        start = time.monotonic()
        out = _run(pool, [(_ok, 1.0), (_sleep, 0), (_ok, 0.0), (_ok, 1.0), (_raise, 0)], timeout_s=0.5)
        assert time.monotonic() - start < 10
        assert out[0] == ("ok", Score(1.0)) and out[2] == ("ok", Score(0.0)) and out[3] == ("ok", Score(1.0))
        assert out[1][0] == "error" and "timeout after 0.5 s" in out[1][1]
        assert out[4] == ("error", "ValueError: bad row")
        assert pool.replaced == 1
        assert _run(pool, [(_ok, 1.0)] * 3, timeout_s=5) == [("ok", Score(1.0))] * 3  # still serving


@pytest.mark.parametrize("crash", [_exit, _segfault])
def test_crashing_worker_costs_only_its_row(crash):
    with VerifierPool(2) as pool:
        before = set(pool.pids())
        out = _run(pool, [(_ok, 1.0), (crash, 0), (_ok, 1.0), (_ok, 0.0)], timeout_s=10)
        assert [o for i, o in enumerate(out) if i != 1] == [("ok", Score(1.0)), ("ok", Score(1.0)), ("ok", Score(0.0))]
        assert out[1][0] == "error" and "verifier worker died" in out[1][1]
        assert pool.replaced == 1 and len(pool.pids()) == 2 and set(pool.pids()) != before


def test_no_worker_survives_the_pool_even_on_error():
    with pytest.raises(RuntimeError, match="boom"):
        with verifier_pool(2, prestart=True) as pool:  # workers start in the background
            _run(pool, [(_ok, 1.0)] * 4, timeout_s=5)
            pids = pool.pids()
            assert len(pids) == 2 and all(alive(p) for p in pids)
            raise RuntimeError("boom")
    assert active() is None
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


def test_verifier_pool_zero_and_nesting():
    with verifier_pool(0) as none:
        assert none is None and active() is None
    with verifier_pool(1) as outer:
        with verifier_pool(3) as inner:
            assert inner is outer  # a run inside a run reuses the open pool


def test_bounded_tasks_stay_in_process():
    task = build("task", "arithmetic")  # needs_timeout = False
    problems = task.problems(4, seed=0)
    with VerifierPool(2) as pool:
        scores = verify_all(task, problems, [p.solution for p in problems])
        assert [s.value for s in scores] == [1.0] * 4
        assert pool.pids() == []  # no worker was ever started


def test_unpicklable_task_falls_back_in_process_with_a_warning():
    class Local:  # defined in a function: pickle cannot find it by name
        needs_timeout = True
        name = "local"

        def verify(self, problem, completion):
            return Score(1.0)

    with VerifierPool(2) as pool:
        with pytest.warns(RuntimeWarning, match="cannot be sent to a worker"):
            scores = verify_all(Local(), [Problem("q", "1")], ["x"])
        assert scores == [Score(1.0)] and pool.pids() == []


def test_adversarial_inputs_bounded_in_pool(dataset_task):
    from tests.unit.tasks.test_verifiers import ADVERSARIAL
    kinds = sorted(ADVERSARIAL)
    with VerifierPool(2):
        start = time.monotonic()
        texts = [ADVERSARIAL[k] for k in kinds] + ["$17$"]
        out = verify_all(dataset_task, [Problem("q", "17")] * len(texts), texts, timeout_s=1.0)
        assert time.monotonic() - start < 2.0 * len(kinds) + 10  # at most ~1 s a row, two rows at a time
    assert [s.value for s in out] == [0.0] * len(kinds) + [1.0]
    assert all(s.meta.get("error") for s in out[:-1]), out  # a guard fired or the worker was killed


def test_fork_start_method_refused():
    with pytest.raises(ValueError, match="fork"):
        VerifierPool(1, start_method="fork")


def test_default_workers_is_cores_per_local_rank(monkeypatch):
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert pool_mod.default_workers() == cores
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(2 * cores))
    assert pool_mod.default_workers() == 1


@pytest.mark.slow  # over ~2 s: not in make test-fast
def test_math_verify_timeout_warnings_stay_off_the_terminal(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "q", "answer": "1/2"}) + "\n")
    script = (
        "from rlvr.registry import build\n"
        "from rlvr.sandbox.pool import VerifierPool\n"
        "from rlvr.tasks import verify_all\n"
        "from rlvr.types import Problem\n"
        "if __name__ == '__main__':\n"
        f"    task = build('task', 'dataset', path={str(data)!r})\n"
        "    ps, ts = [Problem('q', '1/2')] * 4, ['$0.5$', '$\\\\frac{1}{2}$', '$3$', 'x']\n"
        "    serial = [s.value for s in verify_all(task, ps, ts)]\n"
        "    with VerifierPool(2):\n"
        "        pooled = [s.value for s in verify_all(task, ps, ts)]\n"
        "    print(serial, pooled)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "[1.0, 1.0, 0.0, 0.0] [1.0, 1.0, 0.0, 0.0]" in out.stdout
    assert "Timeout is disabled" not in out.stdout + out.stderr


def test_an_interrupted_run_leaves_no_stale_answer_for_the_next(monkeypatch):
    with VerifierPool(1) as pool:
        collect = pool._collect

        def interrupted(*args):
            raise KeyboardInterrupt

        monkeypatch.setattr(pool, "_collect", interrupted)
        with pytest.raises(KeyboardInterrupt):
            _run(pool, [(_ok, 1.0)], timeout_s=5)  # its answer is on the way when the run stops
        monkeypatch.setattr(pool, "_collect", collect)
        assert _run(pool, [(_ok, 0.0), (_ok, 2.0)], timeout_s=5) == [("ok", Score(0.0)), ("ok", Score(2.0))]
