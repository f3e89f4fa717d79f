"""Run folders: a new run never starts over another one (unless told to archive it), and one process
at a time writes a folder (``RUN/.lock`` holds the writer's pid and host)."""

from __future__ import annotations

import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rlvr.notice import notice

LOCK = ".lock"
RUN_FILES = ("config.yaml", "checkpoints", "metrics.jsonl", "summary.json")  # any of them: a run lives here


class RunDirError(ValueError):
    """The run folder cannot be used as asked (it holds another run, or another process writes it)."""


def holds_run(folder: Path) -> bool:
    return any((folder / name).exists() for name in RUN_FILES)


@contextmanager
def claim_run_dir(folder: str | Path, *, resume: bool, overwrite: bool, main: bool = True) -> Iterator[Path]:
    """Make ``folder`` this process's run folder for the duration of the block. A fresh run refuses a
    folder that holds a run unless ``overwrite`` (then the old run is renamed aside, never deleted);
    ``resume`` needs a checkpoint there. Only the ``main`` process checks and locks."""
    folder = Path(folder)
    if not main:
        yield folder
        return
    if resume:
        if not any((folder / "checkpoints").glob("step_*")):
            raise RunDirError(f"cannot resume {folder}: it has no checkpoint (killed before its first save?); "
                              f"start it over with `rlvr train {folder / 'config.yaml'} run.out_dir={folder} "
                              f"--overwrite`, which archives the folder")
    elif holds_run(folder):
        if not overwrite:
            raise RunDirError(f"run folder {folder} already holds a run; continue it with `rlvr train --resume "
                              f"{folder}`, or start over with --overwrite (run.overwrite=true), which archives it")
        _refuse_if_locked(folder)
        archive(folder)
    with run_lock(folder):
        yield folder


def archive(folder: Path, what: str = "run", why: str = "--overwrite") -> Path:
    """Rename ``folder`` to ``<folder>.archived-<UTC time>`` next to it, saying so (``why``: moved the
    previous ``what``); return the new path."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target, n = folder.with_name(f"{folder.name}.archived-{stamp}"), 1
    while target.exists():
        n += 1
        target = folder.with_name(f"{folder.name}.archived-{stamp}-{n}")
    os.replace(folder, target)
    notice(f"{why}: moved the previous {what} in {folder} to {target}")
    return target


@contextmanager
def run_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder/.lock`` (created exclusively) for the block; a stale lock of a process that is no
    longer running is replaced with a notice; a live one is a ``RunDirError``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK
    mine = f"{os.getpid()} {socket.gethostname()}\n"
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            _refuse_if_locked(folder)
            continue  # the stale lock was removed
        with os.fdopen(fd, "w") as fh:
            fh.write(mine)
        break
    try:
        yield
    finally:
        try:
            if path.read_text() == mine:
                path.unlink()
        except OSError:
            pass


def _refuse_if_locked(folder: Path) -> None:
    """Raise when a live process holds ``folder``'s lock; remove the lock when its holder is gone."""
    path = folder / LOCK
    try:
        pid_text, _, host = path.read_text().strip().partition(" ")
    except FileNotFoundError:
        return
    pid = int(pid_text) if pid_text.isdigit() else None
    if pid is not None and (host != socket.gethostname() or _alive(pid)):
        raise RunDirError(f"run folder {folder} is in use by process {pid} on {host} (lock file {path}); "
                          f"wait for it to finish, or delete the lock file if that process is gone")
    notice(f"removing the stale lock {path} (process {pid_text or '?'} is no longer running)")
    path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True
