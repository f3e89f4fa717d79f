"""Signalling a test's own processes by number, and nothing else.

A pid, process group or session id names a process only while something holds it: the process
unreaped, or another process still in that group or session. Once all are gone the number is free and,
with pid_max at 32768 on many machines, is soon handed to an unrelated process -- in CI, perhaps the
other suite running beside this one. So a test signals a number only while it can show the number is
still its own."""

from __future__ import annotations

import os
import subprocess

from rlvr.sandbox.procs import session_members


def kill_group(proc: subprocess.Popen, sig: int) -> bool:
    """Signal the group of ``proc`` (started with ``start_new_session=True``) while that number is still
    ours: ``proc`` not yet reaped, or a live member left in its group or session. True when sent."""
    if proc.poll() is not None and not session_members(proc.pid, groups=True, exiting=True):
        return False
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True
