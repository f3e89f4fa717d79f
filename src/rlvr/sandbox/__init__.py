"""Guarded execution: verifiers that cannot hang a run, and model-written code that cannot touch the machine.

Two halves, one layer (``rlvr.layers``: it imports nothing of rlvr but ``rlvr.types``):

- **Verifier calls** (``safe``, ``verify``, ``pool``, ``worker``, ``procs``): ``safe_verify`` puts a time
  limit and a catch-all around any ``verify``; ``verify_all`` scores a batch, in a pool of worker
  processes for tasks that need a hard limit. Each worker has a session of its own (killed whole on
  time-out), an address-space limit and dies with its parent. These hold *trusted* code that may be
  slow or crash; they are not walls against hostile code.
- **Model-written programs** (``run``, ``child``, ``walls``, ``seccomp``, ``isolation``): ``run_program``
  runs one program and its tests in a fresh interpreter behind the layers below, and reports which
  held. ``rlvr doctor`` prints what this machine holds; ``sandbox.require`` says what a run insists on.

What each limit of ``run_program`` holds (and, after the dash, what it does not):

- namespaces (user, mount, PID, IPC, UTS): its own process numbering (other processes are invisible,
  ``kill`` reaches none of them), its own mounts, SysV IPC and host name -- the kernel is shared: a
  kernel bug reaches the host.
- read-only root: only ``/usr``, ``/lib*``, the Python installation and four devices, read-only;
  ``/proc`` of its own PID namespace (its machine-wide knobs read-only); a tmpfs ``/sandbox`` of
  ``disk_mb`` MiB as cwd, HOME and TMPDIR -- those system folders are readable.
- seccomp filter: ``EPERM`` for ptrace, mount, unshare/setns, clone into new namespaces, bpf, keyctl,
  perf, io_uring, exec, module loading, ... -- x86-64 only; every other syscall (files, sockets,
  fork) is allowed.
- network namespace: no interface but a down loopback: no host, no internet.
- no capabilities, no new privileges; a fixed environment (PATH, LANG, HOME, TMPDIR only).
- rlimits: address space (``memory_mb``), CPU seconds, file size, open files, processes, no core
  files -- RLIMIT_NPROC does not bind root (the audit hook counts forks).
- wall clock and output caps: the parent kills the whole session at ``timeout_s`` or past
  ``output_bytes``, sweeps ``/proc`` and counts leftovers.
- audit hook (Python): writes outside cwd, exec, ctypes, sockets, signals outside, forks past
  ``processes``, each a "blocked" record -- native code (no hook sees it) meets the layers above.

Where a layer cannot be had (no user namespaces, a container's seccomp profile refusing ``unshare``,
another CPU architecture), the program still runs behind the rest, *unless* that layer is required:
``sandbox.require=auto`` (the default) requires every layer this machine holds, so a layer that held
at start and fails later stops every program (``SandboxUnavailable``) instead of running it bare.
The docs: ``docs/code.md``.
"""

from rlvr.sandbox.run import LAYERS, Limits, RunResult, SandboxUnavailable, run_program
from rlvr.sandbox.safe import safe_verify
from rlvr.sandbox.verify import verify_all

__all__ = ["LAYERS", "Limits", "RunResult", "SandboxUnavailable", "run_program", "safe_verify", "verify_all"]
