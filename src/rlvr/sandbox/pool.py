"""A persistent pool of verifier worker processes: a batch scored in parallel, under a hard limit.

Workers start with ``forkserver`` (``spawn`` where there is none), never by forking the training
process, which holds model or CUDA state and many threads (only ``verify_all``'s shared pool outside
a run forks its caller, and only while that has one thread and no CUDA: ``fork_when_safe``). Each worker receives a call as
``(op, key, target, args)``: ``target`` (a task, a reward function; pickled) is sent once per
worker and kept under ``key``, so a verifier is built once per worker; then ``op(target, *args)``
runs there. A call past ``timeout_s`` gets its worker killed and replaced, and its row the outcome
``("error", "timeout after … s")``; a worker that dies (``os._exit``, a segfault) is replaced and
only its row gets ``("error", "verifier worker died …")``. The other rows' outcomes are never lost.

A pool that cannot start is an error, never a batch of zeros: workers that die before loading
anything (a script given on stdin, a script without an ``if __name__ == "__main__":`` guard, whose
workers cannot re-import ``__main__``) raise ``VerifierPoolError`` after ``_START_FAILURES`` tries
in a row, in one line naming the cause and the fix; a main module that is not a file fails before
any worker starts. Each worker is contained (``rlvr.sandbox.worker``): its own session, killed
whole on time-out and when the pool closes (``killed`` counts what verifier calls left running),
and an address-space limit of ``memory_mb`` MiB beyond its start size.

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
import sys
import threading
import time
import warnings
from collections import deque
from contextlib import contextmanager
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator

from rlvr.sandbox.worker import READY, Worker

Outcome = tuple[str, Any]  # ("ok", value) | ("error", reason)
Call = tuple[Callable[..., Any], Any, Any, tuple]  # (op, key, target, args)

_ACTIVE: list["VerifierPool | None"] = []  # None: a caller asked for in-process verification
_PRELOAD = ["rlvr.sandbox.worker", "rlvr.sandbox.pool", "rlvr.tasks", "rlvr.rewards.verifiers", "math_verify"]
_LOAD_S = 120.0  # how long a worker may take to start and load a target before it counts as stuck
_START_FAILURES = 3  # workers in a row that die before loading anything: the pool cannot start
DEFAULT_MEMORY_MB = 4096  # rollout.verify_memory_mb's default
_FIX = ('put the code in a file under `if __name__ == "__main__":`, or use `rollout.verify_workers=0` '
        '(in code: `with verifier_pool(0):`) to verify in-process')


class VerifierPoolError(RuntimeError):
    """The verifier pool cannot run its workers (one line: the cause and the fix)."""


def default_workers() -> int:
    """One worker per CPU core this process may use, shared among the local data-parallel ranks."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))


def active() -> "VerifierPool | None":
    """The innermost pool opened with ``with pool:``, or None (verify in-process)."""
    return _ACTIVE[-1] if _ACTIVE else None


def in_process() -> bool:
    """Whether the innermost ``verifier_pool`` asked for none (``rollout.verify_workers=0``)."""
    return bool(_ACTIVE) and _ACTIVE[-1] is None


def uses_pool(task: Any, reward_functions: list | tuple = ()) -> bool:
    """Whether a run's verification goes to the pool: a task whose checks need a time limit, or
    reward functions (bounded checks, ``needs_timeout = False``, stay in-process)."""
    return bool(getattr(task, "needs_timeout", True) or reward_functions)


@contextmanager
def verifier_pool(workers: int, prestart: bool = False,
                  memory_mb: int = DEFAULT_MEMORY_MB) -> Iterator["VerifierPool | None"]:
    """The pool a run verifies with (``rollout.verify_workers``): the one already active (a caller
    opened it), else a new one of ``workers`` processes (-1: one per core) closed on the way out,
    errors included; none for 0 (verify in-process: ``verify_all`` opens no pool inside). ``prestart``
    starts the workers now, in the background, so their start-up overlaps the run's first generation.
    ``memory_mb``: each worker's address-space limit beyond its start size (0: none)."""
    if workers == 0:
        _ACTIVE.append(None)
        try:
            yield None
        finally:
            del _ACTIVE[len(_ACTIVE) - 1 - _ACTIVE[::-1].index(None)]
        return
    if active() is not None:
        yield active()
        return
    with VerifierPool(workers, memory_mb=memory_mb) as pool:
        if prestart:
            pool.prestart()
        yield pool


class VerifierPool:
    """``workers`` processes that run calls in parallel, each call within ``timeout_s``.

    Workers start on the first ``run`` (a run that never needs one spawns nothing); ``close()``
    (or leaving ``with``) ends them all, and every process their calls left. Shapes: ``run(calls)``
    → one ``Outcome`` per call, in order. ``memory_mb``: each worker's address-space limit beyond
    its start size (0: none). ``fork_when_safe`` (for ``verify_all`` outside a run): fork workers
    from this process while it has one thread and no CUDA (no re-imports: a cold start in ms),
    else forkserver as always; a user never asks for ``fork``.
    """

    def __init__(self, workers: int = 0, start_method: str | None = None, memory_mb: int = DEFAULT_MEMORY_MB,
                 fork_when_safe: bool = False) -> None:
        self.size = workers if workers > 0 else default_workers()
        if memory_mb < 0:
            raise ValueError(f"VerifierPool: memory_mb must be >= 0 (0 = no limit), got {memory_mb}")
        self.memory_mb = memory_mb
        methods = mp.get_all_start_methods()
        method = start_method or ("forkserver" if "forkserver" in methods else "spawn")
        if method == "fork":
            raise ValueError("VerifierPool: start_method 'fork' would fork the training process; "
                             "use forkserver or spawn")
        self._ctx = mp.get_context(method)
        if method == "forkserver":  # workers fork from a server that imported these once (a missing one is skipped)
            self._ctx.set_forkserver_preload(_PRELOAD)
        self._fork = fork_when_safe and "fork" in methods and start_method is None
        self._workers: list[Worker] = []
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None
        self._picklable: dict[Any, tuple[Any, str | None]] = {}
        self.warned: set[Any] = set()  # keys of targets reported once as not sendable to workers
        self.replaced = 0  # workers killed (time-out) or found dead, and replaced
        self.killed = 0  # processes that verifier calls left running, killed with their worker
        self._failed_starts = 0  # workers in a row that died before loading anything

    # --- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> "VerifierPool":
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self.close()

    def prestart(self) -> None:
        """Start all workers from a background thread (``run`` waits for it, and raises what
        stopped it); a no-op once started."""
        if self._starting is None and not self._workers:
            self._starting = threading.Thread(target=self._grow_noting, args=(self.size,), daemon=True,
                                              name="rlvr-verifier-start")
            self._starting.start()

    def _grow_noting(self, n: int) -> None:
        try:
            self._grow(n)
        except BaseException as err:  # noqa: BLE001 - raised again by the next run()
            self._start_error = err

    def _grow(self, n: int) -> None:
        while len(self._workers) < n:
            self._workers.append(self._new_worker())

    def _new_worker(self) -> Worker:
        if self._fork and _fork_is_safe():
            return Worker(mp.get_context("fork"), self.memory_mb)
        cause = _unimportable_main()
        if cause is not None:
            raise VerifierPoolError(f"verifier pool: workers cannot start: {cause}; {_FIX}")
        return Worker(self._ctx, self.memory_mb)

    def _started(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        if self._start_error is not None:
            err, self._start_error = self._start_error, None
            raise err

    def close(self) -> None:
        """Stop every worker (politely, then by force) and every process their calls left running;
        warn with how many of those there were."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        before = self.killed
        for w in self._workers:
            self._stop(w, warn=False)
        self._workers = []
        _warn_killed(self.killed - before, "when the pool closed")

    def _stop(self, worker: Worker, force: bool = False, warn: bool = True) -> int | None:
        code = worker.stop(force)
        self.killed += worker.killed
        if warn:
            _warn_killed(worker.killed, "with a worker that was replaced")
        return code

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
        try:
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
        except BaseException:  # interrupted, or the pool cannot start: busy workers' answers would reach
            for slot in sorted(busy, reverse=True):  # the next run as its own, so they go
                self._stop(self._workers.pop(slot), force=True, warn=False)
            raise
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
            if message == READY:  # the worker has loaded the call's target; its time limit starts
                self._workers[slot].ready, self._failed_starts = True, 0
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
        """Kill worker ``slot`` (and its session) and start another; ``VerifierPoolError`` once
        ``_START_FAILURES`` workers in a row died (or hung) before loading anything."""
        worker = self._workers[slot]
        code = self._stop(worker, force=True)
        if not worker.ready:
            self._failed_starts += 1
            if self._failed_starts >= _START_FAILURES:
                raise VerifierPoolError(
                    f"verifier pool: workers cannot start: {self._failed_starts} in a row ended (last exit code "
                    f"{code}) before loading anything, usually because they cannot re-import the main module "
                    f"(a script on stdin, or one without a main guard; its traceback is above); {_FIX}") from None
        self._workers[slot] = self._new_worker()
        self.replaced += 1
        return code


def _warn_killed(n: int, when: str) -> None:
    if n:
        warnings.warn(f"verifier pool: killed {n} process(es) that verifier calls left running, {when} "
                      f"(each worker runs in a session of its own that ends with it)", RuntimeWarning, stacklevel=3)


def _fork_is_safe() -> bool:
    """Whether forking this process is safe: one thread, and torch (if loaded) without CUDA."""
    if threading.active_count() != 1:
        return False
    torch = sys.modules.get("torch")
    try:
        return not (torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without a usable cuda module holds no CUDA state
        return True


def _unimportable_main() -> str | None:
    """Why a spawned or forkserver worker cannot re-import ``__main__`` (multiprocessing runs its
    file again there), or None: a module run with ``-m`` or a file that exists is fine, and so is
    a main without a file (``python -c``, a REPL)."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        return None
    path = getattr(main, "__file__", None)
    if path is None:
        return None
    full = path if os.path.isabs(path) else os.path.join(mp.process.ORIGINAL_DIR or os.getcwd(), path)
    if os.path.isfile(full):
        return None
    return f"the main module '{path}' is not a file they can re-import (a script given on stdin?)"
