"""Which processes are still alive in a session, read from ``/proc``: the one scan the verifier pool
(its workers' sessions) and the code sandbox (a program's session and process group) both kill by."""

from __future__ import annotations

import os

_PF_EXITING = 0x4  # /proc/<pid>/stat flags: the process is exiting (killed, tearing down)


def session_members(sid: int, *, groups: bool = False, exiting: bool = False) -> list[int]:
    """Live processes (not zombies) whose session is ``sid`` — or, with ``groups``, whose process
    group is ``sid`` too; processes already exiting count only with ``exiting``. [] without /proc."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # state ppid pgrp session ... flags
        except (OSError, IndexError):
            continue  # ended while we looked
        if len(fields) < 7 or fields[0] in (b"Z", b"X"):
            continue
        ours = int(fields[3]) == sid or (groups and int(fields[2]) == sid)
        if ours and (exiting or not int(fields[6]) & _PF_EXITING):
            out.append(int(name))
    return out
