"""Per-program cost of the sandbox as built (one interpreter per program) against a pre-forked zygote.

The zygote is a measurement, not rlvr code: a process already inside the user, mount, PID, IPC, UTS
and network namespaces with the read-only root built (``rlvr.sandbox.walls``) forks once per
program into a fresh PID and mount namespace, mounts its own tmpfs ``/sandbox`` and ``/proc``,
drops its capabilities, sets an address-space limit, installs the seccomp filter, runs a small
program and its test and reports back on a pipe. What it leaves out (the parent's session kill and
sweep, the result records, the audit hook) costs well under a millisecond. The zygote runs in a fresh
``python -I -S`` (as the sandbox child does), never forked from this process, whose size would slow
every fork.

Prints one JSON object: milliseconds per program for ``run_program`` and for the zygote, measured
alternately in this process, and the 1-minute load average (other work slows both).

    python benchmarks/sandbox_zygote.py            # as root, or where user namespaces work
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

PROGRAM, TEST = "def f(x):\n    return x + 1\n", "assert f(1) == 2"


def zygote_program(libc: ctypes.CDLL, walls, seccomp) -> None:
    """In a child of the zygote: fresh PID and mount namespaces, then the program; never returns."""
    if libc.unshare(walls.CLONE_NEWPID | walls.CLONE_NEWNS) != 0:
        os._exit(9)
    walls.be_init()
    walls.mount(None, "/", None, walls.MS_REC | walls.MS_PRIVATE)
    walls.mount("tmpfs", walls.WORK, "tmpfs", walls.MS_NOSUID | walls.MS_NODEV, "size=64m,mode=0700")
    walls.mount("proc", "/proc", "proc", walls.MS_NOSUID | walls.MS_NODEV | walls.MS_NOEXEC)
    os.chdir(walls.WORK)
    walls.drop_capabilities()
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    seccomp.install()
    ns: dict = {}
    exec(compile(PROGRAM, "<program>", "exec"), ns)
    exec(compile(TEST, "<test>", "exec"), ns)
    os._exit(0)


def zygote(n: int, sandbox_dir: str) -> None:
    """The zygote (``python -I -S this --zygote N DIR``): build the walls once, fork ``n`` programs,
    print the mean ms per program."""
    sys.path.insert(0, sandbox_dir)
    import seccomp
    import walls

    libc = ctypes.CDLL(None, use_errno=True)
    held, why = walls.unshare(True)
    if not held:
        print(json.dumps({"error": why}), flush=True)
        os._exit(1)
    walls.be_init()
    walls.build_root(tempfile.mkdtemp(), 64, walls.python_dirs())
    start = time.perf_counter()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            zygote_program(libc, walls, seccomp)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            print(json.dumps({"error": f"program status {status}"}), flush=True)
            os._exit(1)
    print(json.dumps({"ms": 1000 * (time.perf_counter() - start) / n}), flush=True)
    os._exit(0)


def zygote_ms(n: int) -> float:
    import rlvr.sandbox

    sandbox_dir = os.path.dirname(rlvr.sandbox.__file__)
    done = subprocess.run([sys.executable, "-I", "-S", os.path.abspath(__file__), "--zygote", str(n), sandbox_dir],
                          capture_output=True, text=True, timeout=600)
    out = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {"error": done.stderr[-500:]}
    if "error" in out:
        raise SystemExit(f"zygote: {out['error']}")
    return out["ms"]


def run_program_ms(n: int) -> float:
    from rlvr.sandbox.run import Limits, run_program

    job, limits = {"mode": "assert", "source": PROGRAM, "tests": [TEST]}, Limits()
    start = time.perf_counter()
    for _ in range(n):
        assert run_program(job, limits).first("done") is not None
    return 1000 * (time.perf_counter() - start) / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100, help="programs per measurement")
    p.add_argument("--rounds", type=int, default=2, help="alternate measurements of each")
    args = p.parse_args()
    load = os.getloadavg()[0]
    rows = [(run_program_ms(args.n), zygote_ms(args.n)) for _ in range(args.rounds)]
    print(json.dumps({"programs": args.n, "run_program_ms": [round(a, 1) for a, _ in rows],
                      "zygote_ms": [round(b, 1) for _, b in rows], "cores": len(os.sched_getaffinity(0)),
                      "load_avg_1m_before": round(load, 2), "load_avg_1m_after": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--zygote"]:
        zygote(int(sys.argv[2]), sys.argv[3])
    else:
        main()
