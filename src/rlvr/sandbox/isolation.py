"""Which isolation layers this machine holds, and which a run requires (``sandbox.require``).

``supported()`` builds the walls once for a program that does nothing and reads back which layers
held (``namespaces``, ``root``, ``seccomp``, ``network``) or why each did not: the probe is the real
thing, not a guess from kernel settings. ``required(setting)`` turns the setting into the layers
every program must have: ``auto`` (the default) = every layer this machine holds; ``none`` = no
layer (the rlimits, the session kill and the audit hook still apply); or a comma list of layer
names. A named layer the machine cannot hold stops the caller with one line naming it and the
setting that accepts weaker isolation. A run exports its setting as ``RLVR_SANDBOX_REQUIRE`` so that
verifier workers started later use the same one (``setting()``).
"""

from __future__ import annotations

import functools
import os

from rlvr.sandbox.run import LAYERS, Limits, SandboxUnavailable, run_program

ENV = "RLVR_SANDBOX_REQUIRE"
SETTINGS = ("auto", "none")


@functools.lru_cache(maxsize=1)
def supported() -> dict[str, object]:
    """{layer: True | why it does not hold} on this machine (probed once per process)."""
    run = run_program({"mode": "assert", "source": "", "tests": []}, Limits(timeout_s=30.0))
    start = run.first("start")
    if start is None:
        why = f"the sandbox child did not start (status {run.status}: {run.stderr[-200:]!r})"
        return {name: why for name in LAYERS}
    layers = start.get("layers", {})
    return {name: layers.get(name, "not reported") for name in LAYERS}


def parse(setting: str) -> tuple[str, ...] | str:
    """``auto`` | ``none`` | a tuple of layer names; ValueError naming what is wrong."""
    text = str(setting).strip()
    if text in SETTINGS:
        return text
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in LAYERS]
    if unknown or not names:
        raise ValueError(f"sandbox.require: {text!r} is not auto, none or a comma list of layers "
                         f"({', '.join(LAYERS)}); unknown: {unknown or '(empty)'}")
    return names


def required(setting: str) -> tuple[str, ...]:
    """The layers ``setting`` requires on this machine; ``SandboxUnavailable`` (one line) when one of
    them cannot hold here."""
    parsed = parse(setting)
    if parsed == "none":
        return ()
    have = supported()
    if parsed == "auto":
        return tuple(name for name in LAYERS if have[name] is True)
    missing = [name for name in parsed if have[name] is not True]
    if missing:
        weaker = ",".join(n for n in parsed if n not in missing) or "none"
        raise SandboxUnavailable(f"sandbox: this machine cannot hold the '{missing[0]}' layer ({have[missing[0]]}); "
                                 f"to accept weaker isolation set sandbox.require={weaker}")
    return tuple(parsed)


def setting() -> str:
    """The run's ``sandbox.require`` (exported by the run), else ``auto``."""
    return os.environ.get(ENV, "auto") or "auto"


def report() -> list[str]:
    """One line per layer for ``rlvr doctor``: held, or why not."""
    what = {"namespaces": "user, mount, PID, IPC, UTS namespaces",
            "root": "read-only root, own /proc, a tmpfs /sandbox as cwd",
            "seccomp": "syscall filter (ptrace, mount, unshare, bpf, keyctl, io_uring, exec, ...)",
            "network": "network namespace (no interface but a down loopback)"}
    return [f"{name:<11} {'yes' if held is True else 'NO '}  {what[name]}"
            + ("" if held is True else f" -- {held}") for name, held in supported().items()]
