"""Verifiers never hang or crash a run: a time limit and a catch-all around any ``verify``.

``isolation="thread"`` (default) runs the verifier in a fresh daemon thread and stops waiting
after ``timeout_s``: cheap (~0.1 ms), but Python cannot kill a thread, so a verifier stuck in a
loop keeps a core busy until it returns. ``isolation="process"`` forks a child that is killed on
time-out: a hard limit at a few ms per call. Signal-based time limits (``signal.alarm``, used by
math-verify) only work in the main thread; verifiers that rely on them must check
``threading.current_thread() is threading.main_thread()`` (the dataset task does).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import threading
from typing import Any, Callable

from rlvr.types import Problem, Score

Verifier = Callable[[Problem, str], Score]
ISOLATIONS = ("thread", "process")


def safe_verify(fn: Verifier, problem: Problem, completion: str, timeout_s: float | None = 5.0,
                isolation: str = "thread") -> Score:
    """``fn(problem, completion)`` or ``Score(0.0, meta={"error": reason})`` when it raises, times
    out, or returns something that is not a Score with a finite value. ``timeout_s=None`` (or
    <= 0) calls ``fn`` directly, still catching errors."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"safe_verify: unknown isolation '{isolation}'; valid: {', '.join(ISOLATIONS)}")
    if timeout_s is None or timeout_s <= 0:
        outcome = _call(fn, problem, completion)
    elif isolation == "thread":
        outcome = _in_thread(fn, problem, completion, timeout_s)
    else:
        outcome = _in_process(fn, problem, completion, timeout_s)
    return _as_score(outcome)


def verify_all(task: Any, problems: list[Problem], completions: list[str],
               timeout_s: float | None = 5.0, isolation: str = "thread") -> list[Score]:
    """Score every (problem, completion) pair with ``task.verify``; a time limit only for tasks
    that declare ``needs_timeout`` (the synthetic tasks' verifiers are bounded string checks)."""
    if len(problems) != len(completions):
        raise ValueError(f"verify_all: {len(problems)} problems but {len(completions)} completions")
    limit = timeout_s if getattr(task, "needs_timeout", True) else None
    return [safe_verify(task.verify, p, c, limit, isolation) for p, c in zip(problems, completions)]


def _call(fn: Verifier, problem: Problem, completion: str) -> tuple[str, Any]:
    try:
        return "ok", fn(problem, completion)
    except Exception as err:  # noqa: BLE001 - any verifier failure scores 0, with the reason
        return "error", f"{type(err).__name__}: {err}"


def _in_thread(fn: Verifier, problem: Problem, completion: str, timeout_s: float) -> tuple[str, Any]:
    box: list[tuple[str, Any]] = []
    worker = threading.Thread(target=lambda: box.append(_call(fn, problem, completion)), daemon=True)
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
    status, value = _call(fn, problem, completion)
    try:
        send.send((status, value))
    except Exception as err:  # noqa: BLE001 - an unpicklable result is an error, not a hang
        send.send(("error", f"result could not be sent back: {err}"))


def _as_score(outcome: tuple[str, Any]) -> Score:
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
