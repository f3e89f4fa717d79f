"""A generator worker process: its own copy of the policy, its own torch threads, fed over queues.

The trainer process keeps everything but sampling (selection, verification, shaping, budgets); it
sends ``generate`` requests (problems, seed, group offset) and ``sync`` commands, in one FIFO queue,
so the version of the weights each batch was generated with follows from the order of the commands
alone, never from timing. Results come back tagged with that version, with the generator's busy and
idle seconds. Weights arrive over :class:`rlvr.rollout.weight_sync.WeightSync` (gloo, beside the
training world). The trainer-side handle turns a dead or silent worker into a ``GeneratorError``
within ``timeout_s``: a reader thread takes the worker's messages off the results queue, so the
trainer never blocks on the pipe itself (a worker frozen while sending a message, its tensors half
handed over, stalls only that thread).
"""

from __future__ import annotations

import copy
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as mp

from rlvr.rollout.samplers.base import SampleContext
from rlvr.rollout.weight_sync import WeightSync
from rlvr.types import Problem, Rollouts

_POLL_S = 0.2  # how often a waiting trainer checks that the worker is alive
START_S = 120.0  # at least this long for the worker to start (spawn, imports, joining the group)


class GeneratorError(RuntimeError):
    """The generator process died, hung past its timeout or raised."""


@dataclass
class Generated:
    """One batch from the worker: the rows, what generating them cost, and the weights' version."""

    batch: Rollouts  # (N rows) on the CPU
    version: int  # optimizer steps behind the weights that generated it
    completions: int  # engine completions spent (the rollout budget)
    tokens: int
    busy_s: float  # seconds the worker spent generating this batch
    idle_s: float  # seconds the worker waited for a command before it
    problem_index: list[int]  # (N,) each row's position in the submitted problems (the trainer's objects)


def _worker(model: torch.nn.Module, tokenizer: Any, sampler: Any, rollout_cfg: Any, version: int, port: int,
            threads: int, timeout_s: float, bucket_mb: float, commands: Any, results: Any) -> None:
    """The worker's loop (module level so that spawn can import it)."""
    try:
        torch.set_num_threads(threads)
        model = copy.deepcopy(model).eval()  # private memory, not the pages shared with the trainer
        for p in model.parameters():
            p.requires_grad_(False)
        start_s = max(timeout_s, START_S)
        sync = WeightSync(WeightSync.client_store(port, start_s), 1, timeout_s, bucket_mb, start_s)
        results.put(("ready", None))
        mark = time.perf_counter()
        while True:
            cmd = commands.get()
            idle = time.perf_counter() - mark
            if cmd[0] == "stop":
                return
            if cmd[0] == "sync":
                sync.receive(model)
                version = cmd[1]
            elif cmd[0] == "state":
                results.put(("state", {k: v.clone() for k, v in model.state_dict().items()}))
            else:  # ("generate", key, problems, seed, group_offset)
                _, key, problems, seed, offset = cmd
                start = time.perf_counter()
                ctx = SampleContext(tokenizer=tokenizer, rollout=rollout_cfg, seed=seed, group_offset=offset)
                with torch.no_grad():
                    batch = sampler.sample(model, problems, rollout_cfg.group_size, ctx)
                where = {id(p): j for j, p in enumerate(problems)}  # the trainer maps rows back to its objects
                spent = ctx.spent
                results.put(("batch", key, Generated(batch, version, spent.completions, spent.tokens,
                                                     time.perf_counter() - start, idle,
                                                     [where[id(p)] for p in batch.problems])))
            mark = time.perf_counter()
    except Exception:  # the trainer raises it as a GeneratorError
        results.put(("error", traceback.format_exc(limit=4)))


class GeneratorProcess:
    """The trainer's handle on one worker: ``submit``, ``result``, ``sync``, ``state``, ``close``."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, sampler: Any, rollout_cfg: Any, version: int,
                 threads: int = 1, timeout_s: float = 300.0, bucket_mb: float = 64.0, port: int = 0) -> None:
        self.timeout_s = timeout_s
        start_s = max(timeout_s, START_S)
        store = WeightSync.store(port, start_s)
        ctx = mp.get_context("spawn")
        self.commands, self.results = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=_worker, daemon=True, name="rlvr-generator",
                                args=(copy.deepcopy(model).cpu(), tokenizer, sampler, rollout_cfg, version,
                                      store.port, threads, timeout_s, bucket_mb, self.commands, self.results))
        self.proc.start()
        self._start_reader()
        self._done: dict[Any, Generated] = {}
        try:
            self.sync_group = WeightSync(store, 0, timeout_s, bucket_mb, start_s)  # blocks until the worker joins
        except RuntimeError as err:
            self.close()
            raise GeneratorError(f"the generator process did not join the weight-sync group within {start_s:g} s: "
                                 f"{str(err).splitlines()[0]}") from None
        self._store = store
        self._expect("ready", start_s)
        self.version = version

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def submit(self, key: Any, problems: list[Problem], seed: int, group_offset: int) -> None:
        """Queue a batch: G completions of each problem, sampled with ``seed``."""
        self.commands.put(("generate", key, problems, seed, group_offset))

    def result(self, key: Any) -> Generated:
        """The batch submitted as ``key`` (waiting for it; results for other keys are kept)."""
        while key not in self._done:
            msg = self._next()
            if msg[0] != "batch":
                raise GeneratorError(f"generator: expected a batch, got '{msg[0]}'")
            self._done[msg[1]] = msg[2]
        return self._done.pop(key)

    def sync(self, model: torch.nn.Module, version: int) -> int:
        """Push ``model``'s weights as ``version``; the worker takes them after the requests already
        queued. Returns the bytes sent (the broadcast finishes in the background)."""
        self.commands.put(("sync", version))
        self.version = version
        try:
            return self.sync_group.send(model)
        except RuntimeError as err:
            raise GeneratorError(f"weight sync to the generator failed: {str(err).splitlines()[0]}") from None

    def state(self) -> dict[str, torch.Tensor]:
        """The worker's current state dict (after every command queued so far)."""
        self.commands.put(("state",))
        return self._expect("state")

    def close(self, force: bool = False) -> None:
        """Stop the worker (killed at once with ``force``, or when it does not stop within a few seconds)."""
        if self.proc.is_alive() and not force:
            self.commands.put(("stop",))
            self.proc.join(5.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5.0)
        self._stop_reader.set()  # the reader ends at its next poll (nothing is put on `results` from here:
        # its write lock is shared with the worker, which may have died holding it)

    def _start_reader(self) -> None:
        """The thread that moves the worker's messages from ``results`` to ``_inbox`` (:func:`_read`)."""
        self._inbox: queue.Queue = queue.Queue()
        self._stop_reader = threading.Event()
        threading.Thread(target=_read, args=(self.results, self._inbox, self._stop_reader), daemon=True,
                         name="rlvr-generator-reader").start()

    def _expect(self, kind: str, timeout_s: float | None = None) -> Any:
        msg = self._next(timeout_s)
        if msg[0] != kind:
            raise GeneratorError(f"generator: expected '{kind}', got '{msg[0]}'")
        return msg[1]

    def _next(self, timeout_s: float | None = None) -> tuple:
        """The worker's next message, or a GeneratorError once it died or ``timeout_s`` passed."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                msg = self._inbox.get(timeout=_POLL_S)
            except queue.Empty:
                if not self.proc.is_alive():
                    raise GeneratorError(f"the generator process (pid {self.proc.pid}) died with exit code "
                                         f"{self.proc.exitcode}") from None
                if time.monotonic() > deadline:
                    raise GeneratorError(f"the generator process (pid {self.proc.pid}) sent nothing for "
                                         f"{timeout_s:g} s (rollout.async_rollout.timeout_s): it hangs")
                continue
            if msg[0] == "error":
                raise GeneratorError(f"the generator process raised:\n{msg[1]}")
            if msg[0] == "unreadable":  # killed while its message was in transit (tensors unreadable)
                raise GeneratorError(f"the generator process (pid {self.proc.pid}) died while sending a message "
                                     f"({msg[1]})")
            return msg


def _read(results: Any, inbox: queue.Queue, stop: threading.Event) -> None:
    """The reader thread: the worker's messages from ``results`` into ``inbox``, in order, until
    ``stop`` is set; a message that cannot be read (its sender died with it in transit) ends the
    thread as an ``unreadable`` one. Blocking in a read is harmless: the trainer waits on ``inbox``
    with its timeout, and the thread is a daemon (a read stuck on a frozen sender is abandoned)."""
    while not stop.is_set():
        try:
            msg = results.get(timeout=_POLL_S)
        except queue.Empty:
            continue
        except Exception as err:  # OSError, EOFError, a message cut short by its dying sender
            inbox.put(("unreadable", f"{type(err).__name__}: {err}"))
            return
        inbox.put(msg)
