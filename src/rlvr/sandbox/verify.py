"""``verify_all``: score a batch of (problem, completion) pairs, in a verifier pool when that pays.

Tasks whose checks need a time limit (``needs_timeout``, e.g. the dataset task's math-verify) go to
a pool of worker processes, each call under a hard limit: the pool passed in, else the one a run
opened (``rlvr.sandbox.pool.active``), else -- outside a run, for more than ``_HANDFUL`` rows -- a
*shared* pool this module opens on first use and keeps for later calls (closed at exit, or by
``close_shared_pool``). It forks its workers from the caller while that is safe (one thread, no
CUDA), so even its first call costs about what a run's warm pool does; otherwise it starts them
from a forkserver. Inside ``verifier_pool(0)`` (``rollout.verify_workers=0``), inside a worker, or
for a handful of rows with no pool open, the batch is verified in-process, one call at a time.
Bounded checks (``needs_timeout = False``) always run in-process: cheaper than a round trip.
"""

from __future__ import annotations

import atexit
import os
import threading
from contextlib import nullcontext
from typing import Any

import rlvr.sandbox.pool as pool_mod
import rlvr.sandbox.safe as safe
from rlvr.sandbox.safe import as_score, safe_verify, sendable
from rlvr.types import Problem, Score

_HANDFUL = 8  # more rows than this open the shared pool (fewer verify serially: a cold start costs more)
_MAX_TARGETS = 64  # tasks the shared pool holds (it keeps each one alive) before it is started afresh
_SHARED: dict[str, Any] = {}  # {"pool": VerifierPool, "pid": the process that opened it}
_LOCK = threading.Lock()  # one batch at a time in the shared pool


def verify_all(task: Any, problems: list[Problem], completions: list[str], timeout_s: float | None = 5.0,
               isolation: str = "thread", pool: Any = None) -> list[Score]:
    """Score every (problem, completion) pair with ``task.verify``; a time limit only for tasks
    that declare ``needs_timeout``. Those run in ``pool`` (default: the active pool, else the
    shared one for more than a handful of rows; module doc) when the task can be sent to a worker,
    else in-process under ``timeout_s`` with ``isolation`` (``safe_verify``)."""
    if len(problems) != len(completions):
        raise ValueError(f"verify_all: {len(problems)} problems but {len(completions)} completions")
    timed = getattr(task, "needs_timeout", True)
    if timed and problems:
        chosen, shared = _choose(pool, len(problems))
        key = ("task", id(task))
        if chosen is not None and sendable(chosen, key, task, f"task '{getattr(task, 'name', task)}'"):
            calls = [(_verify_op, key, task, (p, c)) for p, c in zip(problems, completions)]
            with _LOCK if shared else nullcontext():
                outcomes = chosen.run(calls, timeout_s)
            return [as_score(outcome) for outcome in outcomes]
    limit = timeout_s if timed else None
    return [safe_verify(task.verify, p, c, limit, isolation) for p, c in zip(problems, completions)]


def _verify_op(task: Any, problem: Problem, completion: str) -> Score:
    return task.verify(problem, completion)


def _choose(pool: Any, rows: int) -> tuple[Any, bool]:
    """(the pool to use or None, whether it is the shared one)."""
    if pool is not None:
        return pool, False
    if pool_mod.in_process() or safe._IN_WORKER:
        return None, False
    if pool_mod.active() is not None:
        return pool_mod.active(), False
    shared = shared_pool(create=rows > _HANDFUL)
    return shared, shared is not None


def shared_pool(create: bool = True) -> "pool_mod.VerifierPool | None":
    """The pool ``verify_all`` uses outside a run (opened here when ``create``), or None."""
    with _LOCK:
        current = _SHARED.get("pool")
        if current is not None and _SHARED["pid"] != os.getpid():  # a forked child: not ours to use
            _SHARED.clear()
            current = None
        if current is not None and len(current._picklable) > _MAX_TARGETS:
            current.close()
            _SHARED.clear()
            current = None
        if current is None and create:
            current = pool_mod.VerifierPool(-1, fork_when_safe=True)
            _SHARED.update(pool=current, pid=os.getpid())
        return current


def close_shared_pool() -> None:
    """End the shared pool's workers (a later ``verify_all`` opens a new one)."""
    with _LOCK:
        current = _SHARED.pop("pool", None)
        if current is not None and _SHARED.pop("pid", None) == os.getpid():
            current.close()


atexit.register(close_shared_pool)
