"""Which layers hold, which a run requires, and what happens where namespaces cannot be had."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlvr.sandbox import seccomp
from rlvr.sandbox.isolation import parse, required, supported
from rlvr.sandbox.run import LAYERS, SandboxUnavailable
from rlvr.train.config import ConfigError, load_config


def test_the_filter_refuses_what_the_issue_names_and_every_jump_lands_inside():
    for name in ("ptrace", "mount", "umount2", "unshare", "setns", "bpf", "keyctl", "add_key", "request_key",
                 "perf_event_open", "io_uring_setup", "io_uring_enter", "io_uring_register", "kexec_load",
                 "kexec_file_load", "init_module", "finit_module", "delete_module", "execve"):
        assert name in seccomp.BLOCKED, name
    code = seccomp.program()
    assert code[0] == (0x20, 0, 0, 4) and code[1][3] == seccomp.AUDIT_ARCH_X86_64  # the ABI is checked first
    for i, (op, jt, jf, _) in enumerate(code):
        if op & 0x07 == 0x05:  # a jump: both targets are instructions of the program
            assert i + 1 + jt < len(code) and i + 1 + jf < len(code), i
    assert [op for op, *_ in code[-3:]] == [0x06] * 3  # it ends in allow, EPERM, ENOSYS
    assert len(set(seccomp.BLOCKED.values())) == len(seccomp.BLOCKED)  # no number listed twice


@pytest.mark.parametrize("setting, error", [("bogus", "unknown: \\['bogus'\\]"), ("", "unknown: \\(empty\\)"),
                                            ("seccomp,nope", "unknown: \\['nope'\\]")])
def test_a_bad_require_setting_names_what_is_wrong(setting, error):
    with pytest.raises(ValueError, match=error):
        parse(setting)
    with pytest.raises((ValueError, ConfigError), match="sandbox.require"):
        load_config(overrides=[f"sandbox.require={setting}"] if setting else ["sandbox.require=' '"])


def test_auto_requires_what_this_machine_holds_and_a_named_layer_it_lacks_stops_in_one_line():
    have = supported()
    assert set(have) == set(LAYERS)
    assert required("auto") == tuple(n for n in LAYERS if have[n] is True)
    assert required("none") == ()
    for name in LAYERS:
        if have[name] is True:
            assert required(name) == (name,)
        else:
            with pytest.raises(SandboxUnavailable, match=f"'{name}'.*sandbox.require="):
                required(name)


NO_NAMESPACES = """
import json, sys
from rlvr.sandbox import seccomp
assert seccomp.install({"unshare": 272}) is None  # as a container's profile does: no new namespaces
from rlvr.registry import build
from rlvr.sandbox.isolation import required, supported
from rlvr.types import Problem
out = {"supported": {k: v is True for k, v in supported().items()}, "auto": list(required("auto"))}
try:
    required("namespaces,seccomp")
except Exception as err:
    out["error"] = f"{type(err).__name__}: {err}"
score = build("verifier", "code").score(Problem("p", meta={"code": {"tests": ["assert f() == 1"]}}),
                                        "def f():\\n    return 1\\n")
out["score"], out["meta"] = score.value, score.meta["sandbox"]
print(json.dumps(out))
"""


@pytest.mark.skipif(seccomp.supported() is not None, reason="the simulation uses the x86-64 filter")
def test_where_namespaces_are_refused_they_are_reported_missing_and_fail_closed_when_required():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("RLVR_SANDBOX_REQUIRE", None)
    done = subprocess.run([sys.executable, "-c", NO_NAMESPACES], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["supported"] == {"namespaces": False, "root": False, "seccomp": True, "network": False}
    assert out["auto"] == ["seccomp"]
    assert out["error"].startswith("SandboxUnavailable: sandbox: this machine cannot hold the 'namespaces' layer")
    assert out["error"].endswith("sandbox.require=seccomp")
    assert (out["score"], out["meta"]) == (1.0, out["supported"])  # the weaker walls still run programs


def test_doctor_prints_every_layer(capsys):
    from rlvr.cli import main

    code = main(["doctor"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == list(LAYERS)
    assert code == (0 if all(v is True for v in supported().values()) else 1)


def test_a_run_stops_before_it_starts_when_a_required_layer_cannot_hold(monkeypatch):
    from rlvr.sandbox import isolation
    from rlvr.train.run import require_sandbox

    monkeypatch.setenv(isolation.ENV, "auto")  # restored after the test: require_sandbox exports its setting
    held = [n for n in LAYERS if supported()[n] is True]
    if held:
        require_sandbox(",".join(held))  # what the machine holds, asked for: the run goes on
        assert os.environ[isolation.ENV] == ",".join(held)
    missing = [n for n in LAYERS if supported()[n] is not True]
    if missing:
        with pytest.raises(SandboxUnavailable, match=f"'{missing[0]}'"):
            require_sandbox(",".join(LAYERS))


NO_USER_NAMESPACES = """
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if os.geteuid() != 0 or libc.unshare(0x10000000) != 0:
    print(json.dumps("no-userns")); sys.exit(0)
for name, text in (("setgroups", "deny"), ("uid_map", "0 0 1"), ("gid_map", "0 0 1")):
    with open(f"/proc/self/{name}", "w") as f:
        f.write(text)
with open("/proc/sys/user/max_user_namespaces", "w") as f:
    f.write("0")  # root of a namespace that may make no user namespace below it: a container's root
from rlvr.registry import build
from rlvr.sandbox.isolation import supported
from rlvr.types import Problem
program = "def f():\\n    return open(%r).read()\\n" % sys.argv[1]
score = build("verifier", "code").score(Problem("p", meta={"code": {"tests": ["assert f() == 'secret'"]}}), program)
print(json.dumps({"supported": {k: v is True for k, v in supported().items()}, "score": score.value,
                  "meta": score.meta["sandbox"]}))
"""


def test_root_without_user_namespaces_still_gets_the_other_layers(tmp_path):
    """Root where user namespaces are switched off (simulated: the root of a throwaway user namespace
    whose ``max_user_namespaces`` is 0) still gets mount, PID, IPC, UTS and network namespaces and the
    read-only root: a secret outside stays unread."""
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("RLVR_SANDBOX_REQUIRE", None)
    done = subprocess.run([sys.executable, "-c", NO_USER_NAMESPACES, str(secret)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if out == "no-userns":  # not root, or this machine has no user namespaces: what it reports is that case
        assert os.geteuid() != 0 or supported()["namespaces"] is True  # root gets them without a user namespace
        return
    held = {"namespaces": True, "root": True, "seccomp": seccomp.supported() is None, "network": True}
    assert out["supported"] == held and out["meta"] == held
    assert out["score"] == 0.0
