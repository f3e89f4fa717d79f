"""The async generator's handle turns every way the worker can vanish into one GeneratorError.

A worker killed while a batch is in transit leaves the trainer a message whose tensors live in the dead
process's shared memory: reading it raises ConnectionResetError / EOFError inside ``Queue.get``. That
must read as "died", like a worker that is simply gone, not as a bare socket error.
"""

from __future__ import annotations

import queue

import pytest

from rlvr.rollout.generator import GeneratorError, GeneratorProcess


class _Queue:
    def __init__(self, error: BaseException | None) -> None:
        self.error = error

    def get(self, timeout: float) -> tuple:
        if self.error is not None:
            raise self.error
        raise queue.Empty


class _Proc:
    pid, exitcode = 4242, -9

    def __init__(self, alive: bool) -> None:
        self.alive = alive

    def is_alive(self) -> bool:
        return self.alive


def _handle(error: BaseException | None, alive: bool) -> GeneratorProcess:
    handle = object.__new__(GeneratorProcess)  # no worker is started: only the receiving side is tested
    handle.results, handle.proc, handle.timeout_s = _Queue(error), _Proc(alive), 0.5
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
