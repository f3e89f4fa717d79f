"""Namespaces and a read-only root for the sandbox child, built with ``ctypes`` (no ``bwrap`` needed).

Standard library only: the sandbox child loads it before it locks itself in, and it may not import
rlvr. The child (C) calls ``unshare``, ``be_init``, ``build_root`` and ``drop_capabilities`` in turn:

1. ``unshare`` a user, mount, PID, IPC and UTS namespace (and a network one when asked) in one call,
   mapping the caller's own uid and gid (root stays root *inside*, with no power over the machine's
   namespaces); root where user namespaces are off (``user.max_user_namespaces=0``) gets the others
   without one; where none can be had, a network namespace alone, as before this module.
2. fork: the child (P) is process 1 of the new PID namespace; C only waits for it and exits with its
   status. When P ends, the kernel kills every process left in the namespace.
3. In P: a private mount tree; a small tmpfs as the new root holding read-only binds of what the
   interpreter needs (``/usr``, ``/lib*``, ``/bin``, the Python prefix, ``/dev/{null,zero,random,urandom}``),
   a fresh ``/proc`` of the new PID namespace with ``sys``, ``sysrq-trigger``, ``irq``, ``bus`` and
   ``fs`` read-only (none where the kernel refuses one), a writable tmpfs ``/sandbox`` of ``disk_mb``
   MiB as cwd, HOME and TMPDIR (no ``/tmp``: nothing of the host's shows); ``pivot_root`` into it,
   the old root detached, the root itself read-only; the host name set to ``sandbox``; a fixed
   environment; then every capability dropped (root inside keeps its uid, not its powers).

Each step that fails is reported by name with the reason; the caller decides whether to go on.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
MNT_DETACH = 2
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # syscall numbers (glibc has no wrapper)
_ST_TO_MS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
             (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME))
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")  # /proc files that act on the whole machine
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
WORK = "/sandbox"  # the writable folder inside: cwd, HOME, TMPDIR (a name no host path starts with)
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": WORK, "TMPDIR": WORK}

_libc = ctypes.CDLL(None, use_errno=True)


class WallError(OSError):
    """One step of building the walls failed (the message names it and the errno)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise WallError(code, f"{what}: {errno.errorcode.get(code, code)}")


def _b(path: str | None) -> bytes | None:
    return None if path is None else os.fsencode(path)


def mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_b(src), _b(dst), _b(fstype), ctypes.c_ulong(flags), _b(data)), f"mount {dst}")


def unshare(network: bool) -> tuple[bool, str | None]:
    """(whether the user/mount/PID/IPC/UTS namespaces hold, why not); the network namespace is
    entered with them, or alone when they cannot be (``network_isolated`` tells)."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | (CLONE_NEWNET if network else 0)
    if _libc.unshare(CLONE_NEWUSER | flags) != 0:
        why = f"unshare(user, mount, pid, ipc, uts): {errno.errorcode.get(ctypes.get_errno(), '?')}"
        if uid == 0 and _libc.unshare(flags) == 0:
            return True, None  # root without user namespaces: the others still hold (capabilities dropped later)
        return False, why
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    return True, None


def network_alone() -> bool:
    """A network namespace by itself (where the full set cannot be had); True when it holds."""
    return _libc.unshare(CLONE_NEWNET) == 0


def be_init() -> None:
    """Fork; the parent waits for the child (process 1 of the new PID namespace) and exits with its
    status; only the child returns."""
    pid = os.fork()
    if pid == 0:
        return
    _, status = os.waitpid(pid, 0)
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def python_dirs() -> list[str]:
    """The folders the running interpreter reads: its installation (standard library, extension
    modules) and the ``sys.path`` folders (site-packages only when the program may import them)."""
    dirs = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}
    dirs |= {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    return sorted(dirs)


def build_root(new: str, disk_mb: int, extra: list[str]) -> dict[str, object]:
    """In P: the new root at ``new`` (an empty folder), entered; what it holds (``proc``: mounted or why not)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    bound: list[str] = []
    for src in [d for d in SYSTEM_DIRS if os.path.lexists(d)] + extra:
        if any(src == b or src.startswith(b + "/") for b in bound):
            continue  # already inside a bound folder
        if os.path.islink(src) and os.path.dirname(src) == "/":
            os.symlink(os.readlink(src), new + src)  # /lib -> usr/lib on merged-/usr systems
            continue
        bind_read_only(src, new + src)
        bound.append(src)
    os.makedirs(new + "/dev")
    for dev in [d for d in DEVICES if os.path.exists(d)]:
        open(new + dev, "w").close()
        mount(dev, new + dev, None, MS_BIND)
    os.mkdir(new + "/proc")
    proc = _mount_proc(new + "/proc")
    os.mkdir(new + WORK)
    mount("tmpfs", new + WORK, "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(disk_mb)}m,mode=0700")
    _pivot(new)
    os.environ.clear()
    os.environ.update(ENV)
    _libc.sethostname(b"sandbox", 7)
    return {"proc": proc, "binds": bound}


def drop_capabilities() -> None:
    """Give up every capability (bounding, ambient, effective, permitted, inheritable): root inside the
    user namespace keeps its uid but may no longer mount, trace or administer anything there."""
    for cap in range(64):
        if _libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP; EINVAL past the last capability
            break
    _libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # two sets of (effective, permitted, inheritable), all empty
    _check(_libc.capset(header, data), "capset")


def bind_read_only(src: str, dst: str) -> None:
    """Bind ``src`` (a folder or a file) at ``dst``, it and every mount below it read-only."""
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "w").close()
    mount(src, dst, None, MS_BIND | MS_REC)
    _read_only(dst)


def _read_only(point: str) -> None:
    """Remount the bind at ``point`` and every mount below it read-only."""
    for inner in [point] + _mounts_below(point):
        mount(None, inner, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _kept_flags(inner))


def _kept_flags(point: str) -> int:
    """The flags a remount must keep (a user namespace may not clear nosuid, nodev, noexec, atime)."""
    have = os.statvfs(point).f_flag
    return sum(ms for st, ms in _ST_TO_MS if have & st)


def _mounts_below(dst: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    return [p for p in points if p.startswith(dst + "/")]


def _mount_proc(dst: str) -> object:
    """A /proc of the new PID namespace, its machine-wide knobs read-only: root inside a user namespace
    is the machine's uid 0, which /proc/sys checks by uid alone (no capability)."""
    try:
        mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except WallError as err:  # a kernel that hides part of the host's /proc refuses a new one: none then
        return str(err)
    for name in PROC_READ_ONLY:
        point = f"{dst}/{name}"
        if os.path.exists(point):
            mount(point, point, None, MS_BIND | MS_REC)
            _read_only(point)
    return True


def _pivot(new: str) -> None:
    number = _PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise WallError(errno.ENOSYS, f"pivot_root: no syscall number known for {os.uname().machine}")
    os.chdir(new)
    _check(_libc.syscall(number, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(WORK)

