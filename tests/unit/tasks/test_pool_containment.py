"""Containment of verifier pool workers: a call past the memory limit scores 0 with the reason and
the pool carries on; processes a call forks die with their worker (on time-out, and when the pool
closes), counted; a pool whose workers cannot start is one clear error, never a batch of zeros."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from rlvr.tasks import pool as pool_mod
from rlvr.tasks.pool import VerifierPool
from rlvr.tasks.procs import session_members
from rlvr.train.config import ConfigError, load_config
from rlvr.types import Score

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and RLIMIT_AS: Linux")


def _apply(fn, arg):
    return fn(arg)


def _run(pool, fns_args, timeout_s=30.0):
    calls = [(_apply, ("fn", fn.__name__), fn, (arg,)) for fn, arg in fns_args]
    return pool.run(calls, timeout_s)


def _ok(x):
    return Score(float(x))


def _allocate(gib):
    buf = bytearray(int(gib * 2**30))  # far past the test's 256 MiB limit (calloc: no page is touched)
    return Score(float(len(buf) > 0))


def _fork_children(n):
    """Fork ``n`` sleeping children (one moves to a process group of its own, one forks a
    grandchild) and return at once, leaving them running."""
    for i in range(n):
        if os.fork() == 0:
            try:
                if i == 0:
                    os.setpgid(0, 0)  # leaves the worker's group, stays in its session
                if i == 1 and os.fork() == 0:
                    time.sleep(600)
                time.sleep(600)
            finally:
                os._exit(0)
    return Score(1.0)


def _fork_then_hang(n):
    _fork_children(n)
    time.sleep(600)


def _wait_for(pred, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.05)
    return pred()


def test_call_over_the_memory_limit_fails_with_reason_and_pool_survives():
    with VerifierPool(1, memory_mb=256) as pool:
        out = _run(pool, [(_ok, 1.0), (_allocate, 4), (_ok, 1.0)])
        assert out[0] == ("ok", Score(1.0)) and out[2] == ("ok", Score(1.0))
        assert out[1][0] == "error" and "MemoryError" in out[1][1] and "rollout.verify_memory_mb" in out[1][1]
        assert _run(pool, [(_ok, 0.0)]) == [("ok", Score(0.0))]  # still serving
    with VerifierPool(1, memory_mb=0) as pool:  # 0: no limit, the same allocation succeeds
        assert _run(pool, [(_allocate, 4)]) == [("ok", Score(1.0))]


def test_forked_children_die_with_the_pool_and_are_counted():
    n = 6
    with pytest.warns(RuntimeWarning, match=r"killed \d+ process\(es\) .*when the pool closed"):
        with VerifierPool(2) as pool:
            assert _run(pool, [(_fork_children, n), (_ok, 1.0)]) == [("ok", Score(1.0))] * 2
            sessions = pool.pids()
            # the children run on after the call returned (n, and the grandchild; the worker itself)
            assert _wait_for(lambda: sum(len(session_members(s)) for s in sessions) >= n + 1 + 2)
    assert all(session_members(s) == [] for s in sessions)
    assert pool.killed >= n + 1


def test_a_timed_out_call_takes_its_children_along():
    with VerifierPool(1) as pool:
        _run(pool, [(_ok, 1.0)])
        (sid,) = pool.pids()
        with pytest.warns(RuntimeWarning, match=r"killed \d+ process\(es\).*with a worker that was replaced"):
            out = _run(pool, [(_fork_then_hang, 3)], timeout_s=2.0)
        assert out[0][0] == "error" and "timeout" in out[0][1]
        assert session_members(sid) == [] and pool.killed >= 3 and pool.replaced == 1
        assert _run(pool, [(_ok, 1.0)]) == [("ok", Score(1.0))]


def test_memory_limit_config_field():
    cfg = load_config(None, ["rollout.verify_memory_mb=512"])
    assert cfg.rollout.verify_memory_mb == 512
    assert load_config(None, []).rollout.verify_memory_mb == pool_mod.DEFAULT_MEMORY_MB
    with pytest.raises((ConfigError, ValueError), match="verify_memory_mb must be >= 0"):
        load_config(None, ["rollout.verify_memory_mb=-1"])
    with pytest.raises(ValueError, match="memory_mb must be >= 0"):
        VerifierPool(1, memory_mb=-5)


_SCRIPT = """
from rlvr.registry import build
from rlvr.tasks import verify_all
from rlvr.tasks.pool import VerifierPool
from rlvr.types import Problem
task = build('task', 'dataset', path={path!r})
problems, texts = [Problem('q', '1/2')] * 64, ['$0.5$', '$3$'] * 32  # a worker start per row, before
with VerifierPool(2):
    print('scores', [s.value for s in verify_all(task, problems, texts)])
"""


def _python(tmp_path, script_on_stdin: bool):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "q", "answer": "1/2"}) + "\n")
    script = _SCRIPT.format(path=str(data))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if script_on_stdin:
        return subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                              timeout=300, env=env, cwd=tmp_path)
    (tmp_path / "no_guard.py").write_text(script)  # no `if __name__ == "__main__":`: workers re-run it
    return subprocess.run([sys.executable, "no_guard.py"], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)


def test_pool_started_from_a_script_on_stdin_is_one_clear_error(tmp_path):
    out = _python(tmp_path, script_on_stdin=True)
    assert out.returncode != 0
    assert "scores" not in out.stdout  # never a batch of zeros
    lines = [line for line in out.stderr.splitlines() if "VerifierPoolError:" in line]
    assert len(lines) == 1, out.stderr[-3000:]
    assert "'<stdin>'" in lines[0] and 'if __name__ == "__main__":' in lines[0]
    assert "rollout.verify_workers=0" in lines[0]
    assert out.stderr.count("Traceback") == 1  # the script's own: no worker ever started


def test_workers_that_die_at_start_stop_the_pool_after_a_few_tries(tmp_path):
    out = _python(tmp_path, script_on_stdin=False)
    assert out.returncode != 0
    assert "scores" not in out.stdout
    lines = [line for line in out.stderr.splitlines() if "VerifierPoolError:" in line]
    assert len(lines) == 1, out.stderr[-3000:]
    assert "workers cannot start" in lines[0] and "rollout.verify_workers=0" in lines[0]
    # bounded: the failed starts (at most _START_FAILURES and the pool's other worker), the script's own
    assert out.stderr.count("Traceback") <= pool_mod._START_FAILURES + 2 + 1, out.stderr[-3000:]
