"""Verifiers never hang or crash a run: a time limit and a catch-all around any ``verify``.

``isolation="thread"`` (default) runs the verifier in a fresh daemon thread and stops waiting
after ``timeout_s``: cheap (~0.1 ms), but Python cannot kill a thread, so a verifier stuck in a
loop keeps a core busy until it returns. ``isolation="process"`` forks a child that is killed on
time-out: a hard limit at a few ms per call. Signal-based time limits (``signal.alarm``, used by
math-verify) only work in the main thread; verifiers that rely on them must check
``threading.current_thread() is threading.main_thread()`` (the dataset task does).

Batches are scored by ``verify_all`` (``rlvr.sandbox.verify``), in the verifier pool
(``rlvr.sandbox.pool``) for tasks that declare ``needs_timeout``. Inside a pool worker the pool is the
limit, so ``safe_verify`` calls its function directly there. This module imports neither.
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import threading
import warnings
from typing import Any, Callable

from rlvr.types import Problem, Score

Verifier = Callable[[Problem, str], Score]
ISOLATIONS = ("thread", "process")
_IN_WORKER = False  # True inside a verifier pool worker: the pool enforces the limit


def safe_verify(fn: Verifier, problem: Problem, completion: str, timeout_s: float | None = 5.0,
                isolation: str = "thread") -> Score:
    """``fn(problem, completion)`` or ``Score(0.0, meta={"error": reason})`` when it raises, times
    out, or returns something that is not a Score with a finite value. ``timeout_s=None`` (or
    <= 0) calls ``fn`` directly, still catching errors."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"safe_verify: unknown isolation '{isolation}'; valid: {', '.join(ISOLATIONS)}")
    if timeout_s is None or timeout_s <= 0 or _IN_WORKER:
        outcome = call(fn, problem, completion)
    elif isolation == "thread":
        outcome = guarded(fn, (problem, completion), timeout_s)
    else:
        outcome = _in_process(fn, problem, completion, timeout_s)
    return as_score(outcome)


def call(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """``("ok", fn(*args))`` or ``("error", reason)`` when it raises."""
    try:
        return "ok", fn(*args)
    except Exception as err:  # noqa: BLE001 - any verifier failure scores 0, with the reason
        return "error", f"{type(err).__name__}: {err}"


def enter_worker() -> None:
    """Set up a verifier pool worker: the pool is the limit; math-verify's warnings stay quiet."""
    global _IN_WORKER
    _IN_WORKER = True
    quiet_math_verify()


class _NoTimeoutWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


def quiet_math_verify() -> None:
    """Drop math-verify's "Timeout is disabled" warning: rlvr switches its limit off on purpose
    and enforces its own (thread, fork or pool worker)."""
    for name in ("math_verify.parser", "math_verify.grader"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoTimeoutWarning) for f in logger.filters):
            logger.addFilter(_NoTimeoutWarning())


def sendable(pool: Any, key: Any, target: Any, what: str) -> bool:
    """Whether ``target`` (a task, a reward function) can go to the pool's workers; when it cannot,
    say why once (``what`` names it) and the caller runs it in-process. False inside a worker."""
    if _IN_WORKER:
        return False
    why = pool.unpicklable(key, target)
    if why is not None and key not in pool.warned:
        pool.warned.add(key)
        warnings.warn(f"verifier pool: {what} cannot be sent to a worker process ({why}); running it "
                      f"in-process", RuntimeWarning, stacklevel=3)
    return why is None


def guarded(fn: Callable[..., Any], args: tuple, timeout_s: float | None) -> tuple[str, Any]:
    """``call(fn, *args)`` in a daemon thread, waited for at most ``timeout_s`` (None or <= 0: no
    limit; inside a pool worker, the pool is the limit)."""
    if timeout_s is None or timeout_s <= 0 or _IN_WORKER:
        return call(fn, *args)
    box: list[tuple[str, Any]] = []
    worker = threading.Thread(target=lambda: box.append(call(fn, *args)), daemon=True)
    worker.start()
    worker.join(timeout_s)
    return box[0] if box else ("error", f"timeout after {timeout_s:g} s")


def _in_process(fn: Verifier, problem: Problem, completion: str, timeout_s: float) -> tuple[str, Any]:
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"  # spawn needs a picklable fn
    ctx = mp.get_context(method)
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, fn, problem, completion), daemon=True)
    child.start()
    send.close()
    try:
        if recv.poll(timeout_s):
            return recv.recv()
        return "error", f"timeout after {timeout_s:g} s"
    except EOFError:
        return "error", f"verifier process died (exit code {child.exitcode})"
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        recv.close()


def _child(send: Any, fn: Verifier, problem: Problem, completion: str) -> None:
    status, value = call(fn, problem, completion)
    try:
        send.send((status, value))
    except Exception as err:  # noqa: BLE001 - an unpicklable result is an error, not a hang
        send.send(("error", f"result could not be sent back: {err}"))


def as_score(outcome: tuple[str, Any]) -> Score:
    status, value = outcome
    if status == "error":
        return Score(0.0, None, {"error": value})
    if not isinstance(value, Score):
        return Score(0.0, None, {"error": f"verifier returned {type(value).__name__}, not Score"})
    try:
        finite = math.isfinite(float(value.value))
    except (TypeError, ValueError):
        finite = False
    if not finite:
        return Score(0.0, value.parsed, {**value.meta, "error": f"non-finite reward {value.value!r}"})
    return value
