"""A seccomp filter of our own: the syscalls a tested program never needs answer ``EPERM``.

Standard library only (``ctypes``): the sandbox child loads it before it locks itself in, and it may
not import rlvr. Why not libseccomp's Python binding: it is not on PyPI (it ships with the C library's
sources and distribution packages), so a clean ``pip install`` could not rely on it; the filter needed
here is a short list of numbers, which a hand-written classic BPF program holds in a few dozen
instructions that the tests check one by one.

The program (``program()``): a syscall from another ABI (i386 through ``int 0x80``, x32) is refused
outright, so the numbers below cannot be dodged; ``clone`` with any namespace flag and every syscall
in ``BLOCKED`` answer ``EPERM``; ``clone3`` answers ``ENOSYS`` (its flags live in memory a filter
cannot read; glibc then falls back to ``clone``); everything else is allowed. Only x86-64 is listed:
on any other machine ``install`` reports the layer missing instead of guessing numbers.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
# x86-64 numbers (arch/x86/entry/syscalls/syscall_64.tbl) of what a test never needs.
BLOCKED = {
    "ptrace": 101, "syslog": 103, "uselib": 134, "personality": 135, "pivot_root": 155, "chroot": 161,
    "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169,
    "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173, "init_module": 175,
    "delete_module": 176, "quotactl": 179, "clock_settime": 227, "kexec_load": 246, "add_key": 248,
    "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298, "fanotify_init": 300,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "kcmp": 312, "finit_module": 313, "kexec_file_load": 320, "bpf": 321,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_getfd": 438, "mount_setattr": 442, "execve": 59, "execveat": 322,
}
CLONE, CLONE3 = 56, 435
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


def supported() -> str | None:
    """None when this machine's syscall numbers are known here, else why not."""
    machine = os.uname().machine
    return None if machine == "x86_64" else f"no syscall table for {machine} here (x86-64 only)"


def program(blocked: dict[str, int] | None = None) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions, refusing ``blocked`` (default ``BLOCKED``); jumps
    are resolved to the labels at the end."""
    blocked = BLOCKED if blocked is None else blocked
    body: list[tuple] = [(_LD_ABS, 0, 0, 4), (_JEQ, 0, "eperm", AUDIT_ARCH_X86_64), (_LD_ABS, 0, 0, 0),
                         (_JGE, "eperm", 0, _X32_BIT)]
    body += [(_JEQ, "eperm", 0, nr) for nr in sorted(blocked.values())]
    body += [(_JEQ, "enosys", 0, CLONE3), (_JEQ, 0, "allow", CLONE), (_LD_ABS, 0, 0, 16),
             (_JSET, "eperm", "allow", NAMESPACE_FLAGS)]
    labels = {"allow": len(body), "eperm": len(body) + 1, "enosys": len(body) + 2}
    body += [(_RET, 0, 0, _ALLOW), (_RET, 0, 0, _ERRNO | errno.EPERM), (_RET, 0, 0, _ERRNO | errno.ENOSYS)]
    out = []
    for i, (code, jt, jf, k) in enumerate(body):
        jt, jf = (labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf))
        assert 0 <= jt < 256 and 0 <= jf < 256, "jump too far for classic BPF"
        out.append((code, jt, jf, k))
    return out


def install(blocked: dict[str, int] | None = None) -> str | None:
    """No new privileges, then the filter (``program(blocked)``) on this process and every process it
    forks later. None when it holds, else why not (the caller reports the layer missing)."""
    why = supported()
    if why is not None:
        return why
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS): {errno.errorcode.get(ctypes.get_errno(), '?')}"
    code = program(blocked)
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in code)
    filters = ctypes.create_string_buffer(raw, len(raw))

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Prog(len(code), ctypes.addressof(filters))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        return f"prctl(PR_SET_SECCOMP): {errno.errorcode.get(ctypes.get_errno(), '?')}"
    return None
