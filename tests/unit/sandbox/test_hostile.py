"""Hostile programs against the code sandbox: each scores 0, and what it tried is checked from outside.

Two passes. *As deployed* (the audit hook on, ``sandbox.require=auto``) every program scores 0 and the
machine is unchanged. *The walls alone* (the audit hook off: what native code, which no Python hook
sees, would meet) the kernel layers must stop the same programs by themselves; where this machine
cannot hold a layer, that pass instead checks that requiring it stops the program before it runs.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
import subprocess
import sys
import time

import pytest

from rlvr.registry import build
from rlvr.rewards.code import verdict
from rlvr.sandbox.isolation import supported
from rlvr.sandbox.procs import session_members
from rlvr.sandbox.run import LAYERS, Limits, SandboxUnavailable, run_program
from rlvr.types import Problem

ALL_HELD = all(held is True for held in supported().values())


@pytest.fixture
def planted(tmp_path):
    """A secret outside the program's folder, a dataset file with the answers, a listener on
    127.0.0.1, and a bystander process whose environment holds a token."""
    token = secrets.token_hex(8)
    secret = tmp_path / "secret.txt"
    secret.write_text(token)
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"prompt": "p", "answer": "%s"}\n' % token)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    bystander = subprocess.Popen(["sleep", "60"], env={"PATH": "/usr/bin:/bin", "RLVR_TEST_TOKEN": token})
    root = tmp_path / "sandboxes"
    root.mkdir()
    yield {"token": token, "secret": str(secret), "answers": str(answers), "port": listener.getsockname()[1],
           "listener": listener, "bystander": bystander, "root": root, "tmp": tmp_path}
    bystander.kill()
    bystander.wait()
    listener.close()


def reads(p) -> dict[str, str]:
    """Programs whose f() returns the planted token if they can reach it."""
    secret, answers = p["secret"], p["answers"]
    environ = ("import os\ndef f():\n    for pid in os.listdir('/proc'):\n        try:\n"
               "            env = open('/proc/%s/environ' % pid, 'rb').read().decode()\n        except Exception:\n"
               "            continue\n        for kv in env.split('\\0'):\n"
               "            if kv.startswith('RLVR_TEST_TOKEN='):\n                return kv.split('=', 1)[1]\n")
    return {
        "python_open": f"def f():\n    return open({secret!r}).read()\n",
        "os_open": f"import os\ndef f():\n    return os.read(os.open({secret!r}, os.O_RDONLY), 100).decode()\n",
        "proc_self_root": f"def f():\n    return open('/proc/self/root' + {secret!r}).read()\n",
        "symlink_made_inside": f"import os\nos.symlink({secret!r}, 'link')\ndef f():\n    return open('link').read()\n",
        "hidden_answers": f"import json\ndef f():\n    return json.loads(open({answers!r}).readline())['answer']\n",
        "other_processes_environ": environ,
    }


def ctypes_reads(p) -> dict[str, str]:
    return {"ctypes_libc_open": (f"import ctypes, os\nlibc = ctypes.CDLL(None)\ndef f():\n"
                                 f"    fd = libc.open({p['secret']!r}.encode(), 0)\n"
                                 f"    return os.read(fd, 100).decode() if fd >= 0 else ''\n")}


def attempts(p) -> dict[str, str]:
    """Programs whose f() returns "done" if what they tried worked."""
    outside = os.path.join(p["tmp"], "written.txt")
    prefix_file = os.path.join(os.path.realpath(sys.base_prefix), f"rlvr-sandbox-{p['token']}")
    syscall = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\ndef f():\n"
               "    return 'done' if {call} == 0 else ctypes.get_errno()\n")
    return {
        "write_outside": f"import os\ndef f():\n    os.close(os.open({outside!r}, os.O_WRONLY | os.O_CREAT))\n"
                         f"    return 'done'\n",
        "write_python_prefix": f"def f():\n    open({prefix_file!r}, 'w').write('x')\n    return 'done'\n",
        "connect_listener": f"import socket\ndef f():\n    socket.create_connection(('127.0.0.1', {p['port']}), 1)\n"
                            f"    return 'done'\n",
        "list_processes": f"import os\ndef f():\n    return 'done' if str({p['bystander'].pid}) in os.listdir('/proc') "
                          f"or len([n for n in os.listdir('/proc') if n.isdigit()]) > 3 else 'few'\n",
        "ptrace": syscall.format(call="libc.ptrace(16, 1, 0, 0)"),  # PTRACE_ATTACH to process 1
        "mount": syscall.format(call="libc.mount(b'none', b'.', b'tmpfs', 0, None)"),
        "unshare": syscall.format(call="libc.unshare(0x10000000)"),  # CLONE_NEWUSER
        "exec_a_shell": "import os\ndef f():\n    os.execv('/bin/sh', ['sh', '-c', 'exit 0'])\n",
        "write_proc_sys": "def f():\n    p = '/proc/sys/vm/overcommit_memory'\n    v = open(p).read()\n"  # writes
                          "    with open(p, 'w') as out:\n        out.write(v)\n    return 'done'\n",  # it back
    }, outside, prefix_file


def resources() -> dict[str, tuple[str, set]]:
    """Programs stopped by a limit: (source, the reasons it may score 0 with)."""
    return {
        "fork_1000": ("import os\nfor _ in range(1000):\n    if os.fork() == 0:\n        os._exit(0)\n"
                      "def f():\n    return 'done'\n", {"forbidden", "runtime_error"}),  # not root: NPROC first
        "allocate_20_GB": ("x = bytearray(20 * 2**30)\ndef f():\n    return 'done'\n", {"memory"}),
        "fill_the_disk": ("import os\ndef f():\n    chunk = b'x' * 2**20\n    for i in range(100000):\n"
                          "        with open('fill%d' % i, 'wb') as out:\n            for _ in range(8):\n"
                          "                out.write(chunk)\n    return 'done'\n", {"runtime_error"}),
        "print_1_GB": ("import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * 2**20)\ndef f():\n"
                       "    return 'done'\n", {"output_limit"}),
    }


def score(source: str, want: str, root, audit_hook: bool = True):
    """The code verifier's score of ``source`` against ``assert f() == want`` (``audit_hook=False``:
    the same run with the Python hook off, the walls alone)."""
    verifier = build("verifier", "code", work_root=str(root), timeout_s=8.0, test_timeout_s=4.0)
    if audit_hook:
        return verifier.score(Problem("p", meta={"code": {"mode": "assert", "tests": [f"assert f() == {want!r}"]}}),
                              source)
    limits = dataclasses.replace(verifier.config.limits(), audit_hook=False)
    run = run_program({"mode": "assert", "source": source, "tests": [f"assert f() == {want!r}"]}, limits)
    return verdict(run, None, False, source, 1)


def assert_nothing_left(p):
    deadline = time.monotonic() + 5.0
    while list(p["root"].iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(p["root"].iterdir()) == []  # every program's folder removed
    assert p["bystander"].poll() is None  # the bystander was never touched
    with pytest.raises(socket.timeout):
        p["listener"].accept()  # nobody connected


def test_a_good_program_passes_behind_every_wall(planted):
    good = score("def f():\n    return 'ok'\n", "ok", planted["root"])
    assert good.value == 1.0, good.meta
    assert good.meta["sandbox"] == {name: held is True for name, held in supported().items()}


def walled() -> bool:
    """Whether this machine holds the namespaces and the read-only root (reads need them: the audit
    hook guards writes, not reads; where they are missing, the fail-closed test checks them instead)."""
    return supported()["namespaces"] is True and supported()["root"] is True


def test_hostile_programs_score_zero_as_deployed(planted):
    p = planted
    tried, outside, prefix_file = attempts(p)
    cases = {**{k: (v, p["token"]) for k, v in {**reads(p), **ctypes_reads(p)}.items()},
             **{k: (v, "done") for k, v in tried.items()},
             **{k: (v, "done") for k, (v, _) in resources().items()}}
    if not walled():  # no walls to read behind, no tmpfs to fill: required, they fail closed (below)
        for name in [*reads(p), "list_processes", "fill_the_disk"]:
            del cases[name]
    for name, (source, want) in cases.items():
        got = score(source, want, p["root"])
        assert got.value == 0.0, (name, got.meta)
        assert got.meta["leftover"] == 0, (name, got.meta)
        if name in resources():
            assert got.meta["reason"] in resources()[name][1], (name, got.meta)
    assert not os.path.exists(outside) and not os.path.exists(prefix_file)
    assert_nothing_left(p)


@pytest.mark.skipif(not ALL_HELD, reason="checked by test_walls_alone_fail_closed_where_a_layer_is_missing")
def test_walls_alone_stop_native_code(planted):
    """The audit hook off: only namespaces, the read-only root, seccomp and the network namespace stand."""
    p = planted
    tried, outside, prefix_file = attempts(p)
    cases = {**{k: (v, p["token"]) for k, v in {**reads(p), **ctypes_reads(p)}.items()},
             **{k: (v, "done") for k, v in tried.items()}}
    for name, (source, want) in cases.items():
        got = score(source, want, p["root"], audit_hook=False)
        assert got.value == 0.0, (name, got.meta)
        assert got.meta.get("blocked") is None, (name, got.meta)  # the hook was off: the kernel refused
        assert all(got.meta["sandbox"].values()), (name, got.meta)
    assert not os.path.exists(outside) and not os.path.exists(prefix_file)
    assert_nothing_left(p)


def test_seccomp_answers_eperm(tmp_path):
    if supported()["seccomp"] is not True:
        pytest.skip("no seccomp layer here: test_walls_alone_fail_closed_where_a_layer_is_missing covers it")
    source = ("import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              "print([libc.unshare(0x10000000) == -1 and ctypes.get_errno(), libc.ptrace(0, 0, 0, 0) == -1 and "
              "ctypes.get_errno(), libc.syscall(321, 0, 0, 0) == -1 and ctypes.get_errno()])\n")
    run = run_program({"mode": "io", "source": source, "inputs": [""]}, Limits(work_root=str(tmp_path),
                                                                              audit_hook=False))
    assert run.first("test")["output"].strip() == "[1, 1, 1]"  # EPERM three times


@pytest.mark.parametrize("layer", LAYERS)
def test_walls_alone_fail_closed_where_a_layer_is_missing(layer, tmp_path):
    """A layer this machine holds is reported held; one it cannot hold, required, runs nothing."""
    held = supported()[layer]
    marker = tmp_path / "ran"
    job = {"mode": "assert", "source": f"open({str(marker)!r}, 'w')\n", "tests": ["assert True"]}
    if held is True:
        run = run_program(job, Limits(work_root=str(tmp_path), require=(layer,), audit_hook=False))
        assert run.first("start")["layers"][layer] is True
        return
    with pytest.raises(SandboxUnavailable, match=f"'{layer}'.*sandbox.require="):
        run_program(job, Limits(work_root=str(tmp_path), require=(layer,), audit_hook=False))
    assert not marker.exists()


def test_a_required_layer_that_does_not_hold_runs_nothing(tmp_path):
    """The network layer switched off, then required: the child stops before the program."""
    job = {"mode": "io", "source": "print('ran')\n", "inputs": [""]}
    with pytest.raises(SandboxUnavailable, match=r"'network' layer did not hold.*sandbox.require=none"):
        run_program(job, Limits(work_root=str(tmp_path), isolate_network=False, require=("network",)))
    run = run_program(job, Limits(work_root=str(tmp_path), isolate_network=False))
    assert run.first("start")["layers"]["network"] != True and run.first("test")["output"] == "ran\n"  # noqa: E712


KILL_ALL = """
KILLER = "import os\\ntry:\\n    os.kill(-1, 9)\\nexcept ProcessLookupError:\\n    pass\\nprint('sent')\\n"
import ctypes, os, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
flags = 0x20000000 | 0x00020000 | (0 if os.geteuid() == 0 else 0x10000000)  # PID + mount (+ user)
uid, gid = os.geteuid(), os.getegid()
if libc.unshare(flags) != 0:
    print("no-namespace"); sys.exit(0)
if uid != 0:
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        open(f"/proc/self/{name}", "w").write(text)
if os.fork():
    _, status = os.wait(); sys.exit(os.waitstatus_to_exitcode(status))
libc.mount(b"none", b"/", None, (1 << 14) | (1 << 18), None)  # private
libc.mount(b"proc", b"/proc", b"proc", 0, None)  # the sweep must see this namespace's processes
from rlvr.sandbox.run import Limits, SandboxUnavailable, run_program
victim = subprocess.Popen(["sleep", "60"])
try:
    limits = Limits(audit_hook=False, require=("namespaces",))
    run = run_program({"mode": "io", "source": KILLER, "inputs": [""]}, limits)
    print(run.first("test")["output"].strip())
except SandboxUnavailable:
    print("refused")
time.sleep(0.2)
print("victim-alive" if victim.poll() is None else "victim-killed")
victim.kill()
"""


def test_kill_minus_one_reaches_nothing_outside(tmp_path):
    """``os.kill(-1, 9)`` with the audit hook off, run inside a throwaway PID namespace of the test's
    own (so that an escape could only hit that namespace): a bystander there must survive."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", KILL_ALL], capture_output=True, text=True, timeout=60,
                          env=env, cwd=tmp_path)
    if "no-namespace" in done.stdout:
        assert supported()["namespaces"] is not True  # the test cannot make one: neither can the sandbox
        return
    assert done.returncode == 0, done.stderr[-2000:]
    held = supported()["namespaces"] is True  # else: required, the program never ran
    assert done.stdout.split() == (["sent", "victim-alive"] if held else ["refused", "victim-alive"]), \
        done.stdout + done.stderr[-500:]
    assert session_members(os.getsid(0)) != []  # and this test's own session is still here
