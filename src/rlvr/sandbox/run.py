"""Run model-written Python in a locked-in child process and collect what it reports.

``run_program(job, limits)`` starts ``python -I -B -X utf8 [-S] child.py`` in a new session (its
own process group) with a minimal environment; the child builds its walls (``rlvr.sandbox.walls``:
namespaces, process 1 of a new PID namespace, a read-only root with a tmpfs ``/sandbox`` as cwd;
``rlvr.sandbox.seccomp``; rlimits; the audit hook), reports which layers held in its "start"
record, and then runs the program and its tests -- or nothing, when a layer of ``limits.require``
did not hold (``SandboxUnavailable`` here, one line naming it and the weaker ``sandbox.require``).
The parent enforces the wall clock (``timeout_s`` for the whole program) and the output caps by
killing, and at the end always kills the whole process group, then sweeps ``/proc`` for any process
still in the child's session or group, kills those and counts what is left (``RunResult.leftover``;
0 unless something escaped).

Only records carrying the run's random nonce are read from the result pipe, and only those of the
first process (a forked copy of the child could repeat them). One interpreter per program: a
pre-forked zygote inside the walls would save its start (``benchmarks/sandbox_zygote.py``: ~10 ms
per program against ~35-60 ms) but must hand each program a fresh PID namespace and tmpfs and be
reached by the parent's kill and sweep; not built (docs/code.md, Throughput). Nothing here imports rlvr's higher layers; the caller turns a ``RunResult`` into a
score (``rlvr.rewards.code``).
"""

from __future__ import annotations

import json
import marshal
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlvr.sandbox.procs import session_members

CHILD = str(Path(__file__).with_name("child.py"))
MODES = ("assert", "io")
LAYERS = ("namespaces", "root", "seccomp", "network")  # what the child reports held, each by name


class SandboxUnavailable(RuntimeError):
    """A layer the sandbox was asked to require did not hold (one line: which, and the setting)."""


@dataclass(frozen=True)
class Limits:
    """What one program may use (the ``code`` verifier's hyperparameters fill it)."""

    timeout_s: float = 5.0  # wall clock of the whole program, all tests included
    test_timeout_s: float = 2.0  # wall clock of one test (and of the program's top level)
    memory_mb: int = 1024  # address space (RLIMIT_AS)
    cpu_s: int = 6  # CPU seconds (RLIMIT_CPU)
    file_mb: int = 16  # largest file it may write (RLIMIT_FSIZE)
    open_files: int = 64  # RLIMIT_NOFILE
    processes: int = 8  # processes in all, the first one included (fork tokens; RLIMIT_NPROC)
    output_bytes: int = 1 << 20  # stdout, stderr and each io test's captured output
    isolate_network: bool = True  # a new network namespace where the OS allows it
    site_packages: bool = False  # let programs import installed packages (numpy, ...)
    work_root: str = ""  # where the per-program temporary directories go ("" = the system temp dir)
    disk_mb: int = 64  # the writable /tmp inside the walls (a tmpfs of this size)
    require: tuple[str, ...] = ()  # layers that must hold, else nothing runs (SandboxUnavailable)
    audit_hook: bool = True  # the Python audit hook on top of the walls (off only to test the walls alone)

    def __post_init__(self) -> None:
        for name in ("timeout_s", "test_timeout_s", "memory_mb", "cpu_s", "file_mb", "open_files", "processes",
                     "output_bytes", "disk_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"sandbox limits: {name} must be > 0, got {getattr(self, name)!r}")
        unknown = [name for name in self.require if name not in LAYERS]
        if unknown:
            raise ValueError(f"sandbox limits: unknown layer(s) {unknown} in require; known: {', '.join(LAYERS)}")


@dataclass
class RunResult:
    """What one sandboxed run left: its records (dicts with ``ev``), output tails and how it ended."""

    records: list[dict[str, Any]] = field(default_factory=list)
    stdout: bytes = b""
    stderr: bytes = b""
    status: int | None = None  # exit code; negative = killed by that signal
    killed: str | None = None  # "timeout" | "output_limit" when the parent killed it
    leftover: int = 0  # processes of its session still alive after the sweep (should be 0)
    swept: int = 0  # processes the sweep had to kill after the group kill
    wall_s: float = 0.0

    def first(self, ev: str) -> dict[str, Any] | None:
        return next((r for r in self.records if r.get("ev") == ev), None)


def run_program(job: dict[str, Any], limits: Limits) -> RunResult:
    """Run ``job`` = {mode: assert|io, source, tests (assert snippets) | inputs (io stdin texts),
    entry_point?, call_check?} in the sandbox and return what happened."""
    if job.get("mode") not in MODES:
        raise ValueError(f"sandbox: mode must be one of {MODES}, got {job.get('mode')!r}")
    base = tempfile.mkdtemp(prefix="rlvr-sandbox-", dir=limits.work_root or None)
    work = os.path.join(base, "work")
    os.mkdir(work, 0o700)
    with open(os.path.join(base, "program.py"), "w", encoding="utf-8") as f:  # for a reader; never run from here
        f.write(str(job.get("source", "")))
    nonce = secrets.token_hex(16)
    read_end, write_end = os.pipe()
    try:
        proc = _start(work, write_end, limits)
    except BaseException:
        os.close(read_end)
        shutil.rmtree(base, ignore_errors=True)
        raise
    finally:
        os.close(write_end)
    start = time.monotonic()
    child_limits = {**asdict(limits), "test_s": limits.test_timeout_s, "output_chars": limits.output_bytes,
                    "parent_pid": os.getpid()}
    spec = {**job, "nonce": nonce, "result_fd": write_end, "limits": child_limits, "root_dir": work}
    try:
        proc.stdin.write(marshal.dumps(spec))
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    out = RunResult()
    try:
        raw, out.killed = _collect(proc, read_end, limits, start)
    finally:
        os.close(read_end)
        out.status, out.swept, out.leftover = _end(proc)
        shutil.rmtree(base, ignore_errors=True)
    out.wall_s = time.monotonic() - start
    out.stdout, out.stderr = raw["stdout"], raw["stderr"]
    out.records = parse_records(raw["result"], nonce)
    refused(out, limits.require)
    return out


def refused(out: RunResult, require: tuple[str, ...]) -> None:
    """Raise ``SandboxUnavailable`` when a required layer did not hold (the child then ran nothing)."""
    start = out.first("start")
    if not require:
        return
    layers = start.get("layers", {}) if start else {}
    missing = [name for name in require if layers.get(name) is not True]
    if missing:
        name = missing[0]
        why = layers.get(name, "the sandbox child did not start") if start else "the sandbox child did not start"
        weaker = ",".join(n for n in require if n not in missing) or "none"
        raise SandboxUnavailable(f"sandbox: the '{name}' layer did not hold ({why}); to accept weaker isolation "
                                 f"set sandbox.require={weaker}")


def _start(work: str, result_fd: int, limits: Limits) -> subprocess.Popen:
    flags = ["-I", "-B", "-X", "utf8"] + ([] if limits.site_packages else ["-S"])
    env = {"HOME": work, "TMPDIR": work, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    return subprocess.Popen([sys.executable, *flags, CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, pass_fds=(result_fd,), start_new_session=True, cwd=work,
                            env=env, close_fds=True)


def _collect(proc: subprocess.Popen, result_fd: int, limits: Limits,
             start: float) -> tuple[dict[str, bytes], str | None]:
    """Read stdout, stderr and results until they close, the first process exits, the wall clock
    runs out or a stream passes its cap; returns (bytes by stream, kill reason). The first process is
    never reaped here (``WNOWAIT``): see ``_end``."""
    caps = {"stdout": limits.output_bytes, "stderr": limits.output_bytes,
            "result": 8 * limits.output_bytes + (1 << 20)}  # io outputs travel JSON-escaped
    bufs = {name: bytearray() for name in caps}
    sel = selectors.DefaultSelector()
    for fd, name in ((proc.stdout.fileno(), "stdout"), (proc.stderr.fileno(), "stderr"), (result_fd, "result")):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, name)
    deadline, exited = start + limits.timeout_s, False
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return {k: bytes(v) for k, v in bufs.items()}, "timeout"
            ready = sel.select(min(left, 0.05))
            if _read_ready(sel, ready, bufs, caps):
                return {k: bytes(v) for k, v in bufs.items()}, "output_limit"
            if not exited:
                exited = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            elif not ready:  # the first process is gone and nothing more arrives: descendants hold the pipes
                break
    finally:
        sel.close()
    return {k: bytes(v) for k, v in bufs.items()}, None


def _read_ready(sel: selectors.BaseSelector, ready: list, bufs: dict[str, bytearray], caps: dict[str, int]) -> bool:
    """Read what ``ready`` holds; True when a stream went over its cap."""
    for key, _ in ready:
        try:
            chunk = os.read(key.fd, 1 << 16)
        except BlockingIOError:
            continue
        if not chunk:
            sel.unregister(key.fd)
            continue
        buf, room = bufs[key.data], caps[key.data] - len(bufs[key.data])
        buf += chunk[:room]
        if len(chunk) > room:
            return True
    return False


def _end(proc: subprocess.Popen) -> tuple[int, int, int]:
    """Kill the process group, sweep its session, then reap the first process; (its exit status,
    negative = killed by that signal; processes the sweep killed; processes left alive).

    The first process stays unreaped (a zombie at worst) until the group kill and the sweep are done:
    its pid is the group's and the session's id, and only while it is unreaped can that number not be
    handed to an unrelated process that the kill-by-number would then hit (pid_max is 32768 on many
    machines, so numbers come round within one test suite). Its peak memory comes from the child's own
    "done" record (``peak_mb``, VmHWM): the kernel's ``ru_maxrss`` would include the parent's memory at
    fork time."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    swept, leftover = sweep(proc.pid)
    try:
        _, status = os.waitpid(proc.pid, 0)
    except ChildProcessError:
        status = 0
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    proc.returncode = code  # reaped here: Popen must not wait for it again
    for stream in (proc.stdout, proc.stderr, proc.stdin):
        if stream is not None and not stream.closed:
            stream.close()
    return code, swept, leftover


def sweep(session: int, tries: int = 50) -> tuple[int, int]:
    """Kill every live process whose session or process group is ``session``; (killed, left alive)."""
    killed = 0
    for _ in range(tries):
        alive = session_members(session, groups=True, exiting=True)
        if not alive:
            return killed, 0
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    return killed, len(session_members(session, groups=True, exiting=True))


def parse_records(raw: bytes, nonce: str) -> list[dict[str, Any]]:
    """The result pipe's records that carry ``nonce``, from the first process that wrote one."""
    records, first_pid = [], None
    prefix = nonce.encode() + b"\t"
    for line in raw.split(b"\n"):
        if not line.startswith(prefix):
            continue
        try:
            record = json.loads(line[len(prefix):].decode("utf-8", "replace"))
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        first_pid = record.get("pid") if first_pid is None else first_pid
        if record.get("pid") == first_pid:
            records.append(record)
    return records
