"""A persistent pool of verifier worker processes: a batch scored in parallel, under a hard limit.

Workers start with ``forkserver`` (``spawn`` where there is none), never by forking the training
process, which holds model or CUDA state and many threads. Each worker receives a call as
``(op, key, target, args)``: ``target`` (a task, a reward function; pickled) is sent once per
worker and kept under ``key``, so a verifier is built once per worker; then ``op(target, *args)``
runs there. A call past ``timeout_s`` gets its worker killed and replaced, and its row the outcome
``("error", "timeout after … s")``; a worker that dies (``os._exit``, a segfault) is replaced and
only its row gets ``("error", "verifier worker died …")``. The other rows' outcomes are never lost.

A worker that receives a new target first loads it (imports, unpickling, and the target's optional
``warm_up()``, e.g. the dataset task building its verifier), then answers "ready"; the call's time
limit starts there, so start-up costs never count as a time-out (loading itself may take
``_LOAD_S``). Inside a worker the pool is the time limit: nested ``safe_verify`` calls run their function
directly (no thread, no second fork), and math-verify's "Timeout is disabled" warnings are
dropped. ``active()`` is the pool the trainer opened for its run, so every batch verification
(collector, samplers, evaluation) uses it without plumbing.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import threading
import time
from collections import deque
from contextlib import contextmanager
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator

Outcome = tuple[str, Any]  # ("ok", value) | ("error", reason)
Call = tuple[Callable[..., Any], Any, Any, tuple]  # (op, key, target, args)

_ACTIVE: list["VerifierPool"] = []
_READY = ("ready", None)  # a worker has loaded a call's target (imports, unpickling); the call starts now
_PRELOAD = ["rlvr.tasks.pool", "rlvr.tasks", "rlvr.rewards.verifiers", "math_verify"]
_LOAD_S = 120.0  # how long a worker may take to start and load a target before it counts as stuck


def default_workers() -> int:
    """One worker per CPU core this process may use, shared among the local data-parallel ranks."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))


def active() -> "VerifierPool | None":
    """The innermost pool opened with ``with pool:``, or None (verify in-process)."""
    return _ACTIVE[-1] if _ACTIVE else None


def uses_pool(task: Any, reward_functions: list | tuple = ()) -> bool:
    """Whether a run's verification goes to the pool: a task whose checks need a time limit, or
    reward functions (bounded checks, ``needs_timeout = False``, stay in-process)."""
    return bool(getattr(task, "needs_timeout", True) or reward_functions)


@contextmanager
def verifier_pool(workers: int, prestart: bool = False) -> Iterator["VerifierPool | None"]:
    """The pool a run verifies with (``rollout.verify_workers``): the one already active (a caller
    opened it), else a new one of ``workers`` processes (-1: one per core) closed on the way out,
    errors included; none for 0 (verify in-process). ``prestart`` starts the workers now, in the
    background, so their start-up overlaps the run's first generation."""
    if workers == 0 or active() is not None:
        yield active() if workers else None
        return
    with VerifierPool(workers) as pool:
        if prestart:
            pool.prestart()
        yield pool


class VerifierPool:
    """``workers`` processes that run calls in parallel, each call within ``timeout_s``.

    Workers start on the first ``run`` (a run that never needs one spawns nothing); ``close()``
    (or leaving ``with``) ends them all. Shapes: ``run(calls)`` → one ``Outcome`` per call, in order.
    """

    def __init__(self, workers: int = 0, start_method: str | None = None) -> None:
        self.size = workers if workers > 0 else default_workers()
        methods = mp.get_all_start_methods()
        method = start_method or ("forkserver" if "forkserver" in methods else "spawn")
        if method == "fork":
            raise ValueError("VerifierPool: start_method 'fork' would fork the training process; "
                             "use forkserver or spawn")
        self._ctx = mp.get_context(method)
        if method == "forkserver":  # workers fork from a server that imported these once (a missing one is skipped)
            self._ctx.set_forkserver_preload(_PRELOAD)
        self._workers: list[_Worker] = []
        self._starting: threading.Thread | None = None
        self._picklable: dict[Any, tuple[Any, str | None]] = {}
        self.warned: set[Any] = set()  # keys of targets reported once as not sendable to workers
        self.replaced = 0  # workers killed (time-out) or found dead, and replaced

    # --- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> "VerifierPool":
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self.close()

    def prestart(self) -> None:
        """Start all workers from a background thread (``run`` waits for it); a no-op once started."""
        if self._starting is None and not self._workers:
            self._starting = threading.Thread(target=self._grow, args=(self.size,), daemon=True,
                                              name="rlvr-verifier-start")
            self._starting.start()

    def _grow(self, n: int) -> None:
        while len(self._workers) < n:
            self._workers.append(_Worker(self._ctx))

    def _started(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None

    def close(self) -> None:
        """Stop every worker (politely, then by force)."""
        self._started()
        for w in self._workers:
            w.stop()
        self._workers = []

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers if w.proc.pid is not None]

    def unpicklable(self, key: Any, target: Any) -> str | None:
        """Why ``target`` cannot be sent to a worker (checked once per key), or None when it can."""
        if key not in self._picklable:  # the target is held so that its id (often the key) is not reused
            try:
                pickle.dumps(target)
                self._picklable[key] = (target, None)
            except Exception as err:  # noqa: BLE001 - any pickling failure means: verify in-process
                self._picklable[key] = (target, f"{type(err).__name__}: {err}")
        return self._picklable[key][1]

    # --- running ----------------------------------------------------------------------------

    def run(self, calls: list[Call], timeout_s: float | None) -> list[Outcome]:
        """Every call's outcome, in order; a call over ``timeout_s`` (None or <= 0: no limit) or whose
        worker dies gets an error outcome and a fresh worker takes its place."""
        results: list[Outcome | None] = [None] * len(calls)
        pending = deque(range(len(calls)))
        self._started()
        self._grow(min(self.size, len(calls)))
        busy: dict[int, tuple[int, float]] = {}  # worker slot -> (call index, deadline)
        limit = timeout_s if timeout_s is not None and timeout_s > 0 else None
        while pending or busy:
            for slot in range(len(self._workers)):
                if pending and slot not in busy:
                    i = pending.popleft()
                    results[i] = self._dispatch(slot, calls[i])
                    if results[i] is None:  # a worker loading a new target has _LOAD_S until ready
                        span = max(_LOAD_S, limit or 0.0) if self._workers[slot].loading else limit
                        busy[slot] = (i, time.monotonic() + span if span else float("inf"))
            if busy:
                self._collect(busy, results, limit)
        return results  # type: ignore[return-value]

    def _dispatch(self, slot: int, call: Call) -> Outcome | None:
        """Send ``call`` to worker ``slot``; an outcome now only when it cannot be sent at all."""
        op, key, target, args = call
        for _ in range(2):  # an idle worker found dead is replaced once
            worker = self._workers[slot]
            try:
                worker.send(op, key, target, args)
                return None
            except (BrokenPipeError, ConnectionError, EOFError, OSError):
                self._replace(slot)
            except Exception as err:  # noqa: BLE001 - an unpicklable call fails its row only
                return "error", f"call could not be sent to a verifier worker: {type(err).__name__}: {err}"
        return "error", "verifier worker could not be started"

    def _collect(self, busy: dict[int, tuple[int, float]], results: list, limit: float | None) -> None:
        """Wait for the first answer or deadline; record the outcomes that arrived or ran out."""
        now = time.monotonic()
        wait_s = max(0.0, min(d for _, d in busy.values()) - now) if limit else None
        conns = {self._workers[slot].conn: slot for slot in busy}
        for conn in wait(list(conns), wait_s):
            slot = conns[conn]
            i, _ = busy.pop(slot)
            try:
                message = conn.recv()
            except (EOFError, OSError):
                code = self._replace(slot)
                results[i] = "error", f"verifier worker died (exit code {code})"
                continue
            if message == _READY:  # the worker has loaded the call's target; its time limit starts
                busy[slot] = (i, time.monotonic() + limit if limit else float("inf"))
            else:
                results[i] = message
        now = time.monotonic()
        for slot, (i, deadline) in list(busy.items()):
            if now >= deadline:
                busy.pop(slot)
                self._replace(slot)
                results[i] = "error", f"timeout after {limit:g} s (verifier worker killed and replaced)"

    def _replace(self, slot: int) -> int | None:
        code = self._workers[slot].stop(force=True)
        self._workers[slot] = _Worker(self._ctx)
        self.replaced += 1
        return code


class _Worker:
    """One worker process and the parent's end of its pipe; ``known`` = targets it already holds."""

    def __init__(self, ctx: Any) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_serve, args=(child,), daemon=True, name="rlvr-verifier")
        self.proc.start()
        child.close()
        self.known: set[Any] = set()
        self.loading = False

    def send(self, op: Callable[..., Any], key: Any, target: Any, args: tuple) -> None:
        self.loading = key not in self.known  # the worker answers _READY once it has loaded target
        self.conn.send((op, key, target if self.loading else None, args))
        self.known.add(key)

    def stop(self, force: bool = False) -> int | None:
        if not force and self.proc.is_alive():
            try:
                self.conn.send(None)
            except (BrokenPipeError, ConnectionError, OSError):
                pass
            self.proc.join(2.0)
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()
        return self.proc.exitcode


def _serve(conn: Any) -> None:
    """The worker loop: hold targets by key, run ``op(target, *args)``, send back the outcome."""
    from rlvr.tasks import safe

    safe.enter_worker()
    held: dict[Any, Any] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        except Exception as err:  # noqa: BLE001 - e.g. a target whose module does not import here
            conn.send(("error", f"call could not be read in the verifier worker: {type(err).__name__}: {err}"))
            continue
        if message is None:
            return
        op, key, target, args = message
        if target is not None:  # loaded (modules imported, unpickled, warmed up): the call's time starts now
            held[key] = target
            if callable(getattr(target, "warm_up", None)):
                safe.call(target.warm_up)
            conn.send(_READY)
        outcome = safe.call(op, held[key], *args) if key in held else \
            ("error", "the verifier worker could not read this call's task or function")
        try:
            conn.send(outcome)
        except Exception as err:  # noqa: BLE001 - an unpicklable result is an error, not a hang
            conn.send(("error", f"result could not be sent back: {type(err).__name__}: {err}"))
