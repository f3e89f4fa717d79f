"""Hostile programs through the ``code`` verifier and the verifier pool: each scores 0 with its reason,
leaves no process behind (checked here from /proc, independently of the sandbox's own sweep), stays
within its memory limit, harms nothing outside its directory, and the batch goes on."""

from __future__ import annotations

import os
import time

import pytest

from rlvr.registry import build
from rlvr.sandbox.pool import VerifierPool
from rlvr.sandbox.verify import verify_all
from rlvr.types import Problem, Score

MEMORY_MB = 512


class CodeTask:
    """The smallest task the pool can run: every problem verified by one ``code`` verifier."""

    name = "code-fixture"
    needs_timeout = True

    def __init__(self, **params):
        self.params = params
        self.verifier = None

    def verify(self, problem: Problem, completion: str) -> Score:
        if self.verifier is None:
            self.verifier = build("verifier", "code", **self.params)
        return self.verifier.score(problem, completion)


def hostile(tmp_path):
    outside, sentinel = tmp_path / "outside.txt", tmp_path / "sentinel.txt"
    sentinel.write_text("keep me")
    return {
        "fork_bomb": ("import os\nwhile True:\n    os.fork()\n", "forbidden"),
        "allocate_50_GB": ("x = bytearray(50 * 2**30)\n", "memory"),
        "infinite_loop": ("while True:\n    pass\n", "timeout"),
        "write_outside": (f"open({str(outside)!r}, 'w').write('x')\n", "forbidden"),
        "chdir_then_write": (f"import os\nos.chdir({str(tmp_path)!r})\nopen('outside.txt', 'w')\n",
                             ("forbidden", "runtime_error")),  # runtime_error: behind the walls no such folder
        "open_socket": ("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
                        "s.connect(('203.0.113.1', 80))\n", "forbidden"),
        "kill_the_test": (f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)\n",
                          ("forbidden", "runtime_error")),  # runtime_error: behind the walls no such process
        "delete_parent_files": ("import os\nfor f in os.listdir('..'):\n    os.remove(os.path.join('..', f))\n"
                                f"os.remove({str(sentinel)!r})\n", "forbidden"),
        "print_1_GB": ("import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * 2**20)\n", "output_limit"),
        "exit_before_tests": ("import sys\nsys.exit(0)\n", "exit_before_tests"),
        "hard_exit_before_tests": ("import os\nos._exit(0)\n", "exit_before_tests"),
        "ctypes_libc": ("import ctypes\nctypes.CDLL(None).kill(0, 9)\n", "forbidden"),
        "run_a_shell": ("import os\nos.system('sleep 30 &')\n", "forbidden"),
    }, outside, sentinel


def sandbox_processes(root) -> list[int]:
    """Live processes started with HOME inside ``root`` (every sandboxed program and its children)."""
    marker = f"HOME={root}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in env and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def test_hostile_programs_score_zero_with_reasons_and_leave_nothing(tmp_path):
    programs, outside, sentinel = hostile(tmp_path)
    root = tmp_path / "sandboxes"
    root.mkdir()
    task = CodeTask(memory_mb=MEMORY_MB, timeout_s=8.0, test_timeout_s=1.0, work_root=str(root))
    spec = {"mode": "assert", "tests": ["assert f(2) == 3"]}
    names = list(programs)
    sources = [programs[n][0] + "\ndef f(x):\n    return x + 1\n" for n in names]
    escaping = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
                "def f(x):\n    return x + 1\n")
    good = "def f(x):\n    return x + 1\n"
    escapes = 8  # a child in its own session that outlives its parent (see the next test)
    problems = [Problem("p", meta={"code": spec}) for _ in range(len(sources) + escapes + 1)]
    with VerifierPool(2) as pool:
        scores = verify_all(task, problems, sources + [escaping] * escapes + [good], timeout_s=60.0, pool=pool)
        assert pool.replaced == 0  # no worker was killed: not by a program, not by a time-out
    for name, score in zip(names, scores):
        assert score.value == 0.0, (name, score.meta)
        want = programs[name][1]
        assert score.meta["reason"] in (want if isinstance(want, tuple) else (want,)), (name, score.meta)
        assert score.meta["leftover"] == 0, name
    assert [s.value for s in scores[len(names):]] == [1.0] * (escapes + 1)  # the batch went on
    memory = scores[names.index("allocate_50_GB")]
    assert memory.meta["peak_mb"] is not None and memory.meta["peak_mb"] < MEMORY_MB
    assert not outside.exists() and sentinel.read_text() == "keep me"
    deadline = time.monotonic() + 5.0  # SIGKILLed processes may take a moment to disappear
    while sandbox_processes(root) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = sandbox_processes(root)
    assert left == [], [open(f"/proc/{pid}/stat").read() for pid in left]
    assert list(root.iterdir()) == []  # every temporary directory was removed


def test_network_isolation_is_reported():
    score = build("verifier", "code").score(Problem("p", meta={"code": {"tests": ["assert True"]}}), "x = 1\n")
    assert score.value == 1.0
    assert isinstance(score.meta["network_isolated"], bool)


@pytest.mark.parametrize("mode", ["assert", "io"])
def test_printing_past_the_cap_stops_with_output_limit(mode):
    verifier = build("verifier", "code", output_bytes=1 << 16)
    spec = {"mode": mode, "tests": ["assert True"]} if mode == "assert" else \
        {"mode": "io", "io": [{"input": "", "output": ""}]}
    score = verifier.score(Problem("p", meta={"code": spec}), "while True:\n    print('x' * 1000)\n")
    assert (score.value, score.meta["reason"]) == (0.0, "output_limit")


def test_children_in_their_own_session_die_with_the_program(tmp_path):
    """A child that calls setsid() escapes the group kill and the session sweep; PR_SET_PDEATHSIG
    must still end it. Before the fork race was closed (the parent exiting before its child had set
    the signal), 10 of 30 such runs left their child behind on a loaded 2-core machine."""
    from rlvr.sandbox.run import Limits, run_program

    limits = Limits(work_root=str(tmp_path))
    source = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
    for _ in range(30):
        run_program({"mode": "assert", "source": source, "tests": ["assert True"]}, limits)
    deadline = time.monotonic() + 5.0
    while sandbox_processes(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes(tmp_path) == []



@pytest.mark.parametrize("source", ["x = 1\n", "while True:\n    pass\n"], ids=["exits", "killed_at_timeout"])
def test_the_group_kill_and_sweep_run_while_the_program_is_unreaped(tmp_path, monkeypatch, source):
    """The sandbox kills by number (the program's pid is its group's and session's id). Once the program
    is reaped, that number can be handed to any new process -- pid_max is 32768 here, so numbers come
    round within a test suite -- and a late group kill or sweep would hit it. So both must run while the
    program is still unreaped: alive, or a zombie holding its number."""
    from rlvr.sandbox import run as sandbox

    seen = []

    def state(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return "gone"

    real_killpg, real_sweep = os.killpg, sandbox.sweep
    monkeypatch.setattr(sandbox.os, "killpg", lambda pid, sig: (seen.append(("killpg", state(pid))),
                                                                real_killpg(pid, sig)))
    monkeypatch.setattr(sandbox, "sweep", lambda pid: (seen.append(("sweep", state(pid))), real_sweep(pid))[1])
    limits = sandbox.Limits(work_root=str(tmp_path), timeout_s=1.0)
    run = sandbox.run_program({"mode": "assert", "source": source, "tests": ["assert True"]}, limits)
    assert [name for name, _ in seen] == ["killpg", "sweep"]
    assert all(st != "gone" for _, st in seen), seen  # the number was still the program's
    assert run.leftover == 0
