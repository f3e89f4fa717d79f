"""The async generator's handle turns every way the worker can vanish into one GeneratorError.

A worker killed while a batch is in transit leaves the trainer a message whose tensors live in the dead
process's shared memory: reading it raises ConnectionResetError / EOFError inside ``Queue.get``. That
must read as "died", like a worker that is simply gone, not as a bare socket error. A worker frozen
while a batch is in transit leaves a message that cannot be read at all (its tensors' file descriptors
are handed over by a thread of the frozen process): the trainer must still say "hangs" after its
timeout instead of waiting on the pipe for ever.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time

import pytest
import torch
import torch.multiprocessing as mp

from rlvr.rollout.generator import GeneratorError, GeneratorProcess


class _Queue:
    """A results queue whose ``get`` raises ``error``, or has nothing."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error

    def get(self, timeout: float) -> tuple:
        if self.error is not None:
            raise self.error
        time.sleep(timeout)
        raise queue.Empty


class _Proc:
    pid, exitcode = 4242, -9

    def __init__(self, alive: bool) -> None:
        self.alive = alive

    def is_alive(self) -> bool:
        return self.alive


_HANDLES: list[GeneratorProcess] = []


@pytest.fixture(autouse=True)
def _stop_readers():
    yield
    while _HANDLES:
        _HANDLES.pop()._stop_reader.set()


def _handle(error: BaseException | None, alive: bool) -> GeneratorProcess:
    handle = object.__new__(GeneratorProcess)  # no worker is started: only the receiving side is tested
    handle.results, handle.proc, handle.timeout_s = _Queue(error), _Proc(alive), 0.5
    handle._start_reader()
    _HANDLES.append(handle)
    return handle


@pytest.mark.parametrize("error", [ConnectionResetError(104, "Connection reset by peer"), EOFError(),
                                   ConnectionRefusedError(111, "Connection refused")])
def test_a_message_unreadable_because_its_sender_died_is_a_generator_error(error):
    with pytest.raises(GeneratorError, match="died while sending"):
        _handle(error, alive=False)._next()


def test_a_dead_worker_with_nothing_in_the_queue_is_reported_with_its_exit_code():
    with pytest.raises(GeneratorError, match="died with exit code -9"):
        _handle(None, alive=False)._next()


def test_a_live_worker_that_sends_nothing_is_reported_as_hanging_after_the_timeout():
    with pytest.raises(GeneratorError, match="hangs"):
        _handle(None, alive=True)._next(timeout_s=0.0)


def _send_then_freeze(results) -> None:
    """A worker that puts a batch (a tensor: its storage goes by file descriptor, handed over by a thread
    of this process), waits until the message is in the pipe, then stops itself."""
    results.put(("batch", 0, torch.arange(4096)))
    results.close()
    results.join_thread()  # the message is written
    os.kill(os.getpid(), signal.SIGSTOP)


def test_a_worker_frozen_with_a_batch_in_transit_reads_as_hanging_not_as_a_stuck_trainer():
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_send_then_freeze, args=(results,), daemon=True)
    proc.start()
    handle = object.__new__(GeneratorProcess)
    handle.results, handle.proc, handle.timeout_s = results, proc, 2.0
    outcome: list[BaseException] = []

    def wait():
        try:
            handle._next()
        except BaseException as err:  # noqa: BLE001 — recorded for the assertion below
            outcome.append(err)
    waiter = threading.Thread(target=wait, daemon=True)
    try:
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline and not _stopped(proc.pid):
            time.sleep(0.05)
        assert _stopped(proc.pid), "the worker did not freeze itself"
        handle._start_reader()  # only now: the message is in the pipe and its sender is frozen
        waiter.start()
        waiter.join(30.0)
        assert not waiter.is_alive(), "the trainer is stuck reading a frozen worker's message"
        assert len(outcome) == 1 and isinstance(outcome[0], GeneratorError) and "hangs" in str(outcome[0])
    finally:
        if hasattr(handle, "_stop_reader"):
            handle._stop_reader.set()
        proc.kill()
        proc.join(5.0)


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state T in /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except FileNotFoundError:
        return False
