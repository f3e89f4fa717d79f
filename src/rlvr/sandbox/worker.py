"""One verifier pool worker: the process, its containment, and the loop it runs.

Containment (``contain``, first thing in the worker): the worker starts its own session (so its
process group and session id are its pid), its address space may grow by at most ``memory_mb``
MiB beyond its size at start (``RLIMIT_AS``; an allocation past it raises ``MemoryError``, the
call scores 0 with the reason), it dies with its parent (``PR_SET_PDEATHSIG``), and torch, if
loaded, uses one thread (one worker per core). ``Worker.stop`` kills the whole session: the worker,
and every process a verifier call started (children, grandchildren, a child that left the
group for a new one) -- counted, so the pool can say how many it killed. Only a process that
starts a session of its own (``setsid``) escapes; rlvr runs as root in containers, where
``RLIMIT_NPROC`` is not enforced, so the pool kills sessions itself.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from multiprocessing.connection import wait
from typing import Any, Callable

from rlvr.sandbox.procs import session_members

READY = ("ready", None)  # a worker has loaded a call's target (imports, unpickling); the call starts now
_SWEEP_ROUNDS = 50  # scans of /proc while a fork bomb keeps forking (each round kills what it found)
_EXIT_WAIT_S = 30.0  # how long stop() waits for the killed processes to finish exiting


class Worker:
    """One worker process and the parent's end of its pipe; ``known`` = targets it already holds;
    ``ready`` = it has loaded a target at least once (it started); ``killed`` = processes its calls
    left behind, killed when it stopped."""

    def __init__(self, ctx: Any, memory_mb: int) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        # PR_SET_PDEATHSIG fires when the *thread* that started the worker ends: only safe to ask for
        # from the main thread, or where the parent is the forkserver (one thread).
        with_parent = ctx.get_start_method() == "forkserver" or threading.current_thread() is threading.main_thread()
        self.proc = ctx.Process(target=serve, args=(child, memory_mb, with_parent), daemon=True,
                                name="rlvr-verifier")
        self.proc.start()
        child.close()
        self.known: set[Any] = set()
        self.loading = False
        self.ready = False
        self.killed = 0
        self._stopped = False

    def send(self, op: Callable[..., Any], key: Any, target: Any, args: tuple) -> None:
        self.loading = key not in self.known  # the worker answers READY once it has loaded target
        self.conn.send((op, key, target if self.loading else None, args))
        self.known.add(key)

    def stop(self, force: bool = False) -> int | None:
        """End the worker (asked politely unless ``force``, then killed) and everything in its
        session; the exit code of the worker. Once only."""
        if self._stopped:
            return self.proc.exitcode
        self._stopped = True
        if not force and self.proc.is_alive():
            try:
                self.conn.send(None)
            except (BrokenPipeError, ConnectionError, OSError):
                pass
            wait([self.proc.sentinel], 2.0)
        pid = self.proc.pid
        if pid is not None:
            self.killed += kill_session(pid)
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()
        return self.proc.exitcode


def kill_session(sid: int) -> int:
    """SIGKILL every live process of session ``sid`` (the worker's pid); how many, the worker aside.
    Only while the session has members is its id certain to be ours (a live session keeps the
    number from reuse), so the group is signalled only then."""
    killed: set[int] = set()
    for _ in range(_SWEEP_ROUNDS):  # until a scan finds no process it has not signalled yet
        members = [pid for pid in session_members(sid) if pid not in killed]
        if not members:
            break
        try:
            os.killpg(sid, signal.SIGKILL)  # the worker's group at once: a fork in progress cannot outrun it
        except OSError:
            pass  # the group is empty: every member left it
        for pid in members:  # and members that moved to a group of their own
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        killed.update(members)
    deadline = time.monotonic() + _EXIT_WAIT_S  # dying takes CPU (a big forked process unmaps its memory)
    while killed and session_members(sid) and time.monotonic() < deadline:
        time.sleep(0.02)
    killed.discard(sid)
    return len(killed)


def contain(memory_mb: int, with_parent: bool = True) -> None:
    """In the worker: a session of its own, the address-space limit, death with the parent (when
    ``with_parent``), one torch thread."""
    try:
        os.setsid()
    except OSError:
        pass  # already a session leader
    if memory_mb > 0:
        _limit_memory(memory_mb)
    if with_parent and sys.platform.startswith("linux"):
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _limit_memory(memory_mb: int) -> None:
    try:
        import resource
    except ImportError:  # no resource module (not POSIX): no limit
        return
    try:
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        size = 0
    limit = size + memory_mb * 2**20
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # hard too: a verifier cannot lift it


def serve(conn: Any, memory_mb: int = 0, with_parent: bool = False) -> None:
    """The worker loop: hold targets by key, run ``op(target, *args)``, send back the outcome."""
    contain(memory_mb, with_parent)
    import rlvr.sandbox.safe as safe

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
            conn.send(READY)
        outcome = safe.call(op, held[key], *args) if key in held else \
            ("error", "the verifier worker could not read this call's task or function")
        if outcome[0] == "error" and str(outcome[1]).startswith("MemoryError"):
            outcome = ("error", f"MemoryError: over the verifier memory limit ({memory_mb} MiB beyond the "
                                f"worker's start size; rollout.verify_memory_mb)")
        try:
            conn.send(outcome)
        except Exception as err:  # noqa: BLE001 - an unpicklable result is an error, not a hang
            conn.send(("error", f"result could not be sent back: {type(err).__name__}: {err}"))
