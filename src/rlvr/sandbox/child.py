"""The sandbox's child side: run as ``python -I -B -X utf8 child.py`` by ``rlvr.sandbox.run``.

Standard library only, and never imported by rlvr itself; it starts in ~13 ms because it imports
little (``marshal`` in, a small JSON writer out: ``json`` and ``re`` alone would cost ~9 ms per
program). It reads its job from stdin (``marshal``: the nonce, the program, its tests, the limits),
locks itself in, then runs the program and its tests, writing one record per event to the result
pipe as ``<nonce>\\t<json>`` lines; the parent keeps only lines that carry the nonce, so a program
printing a fake verdict scores nothing.

Locking in, in order: stdin re-pointed at /dev/null; ``PR_SET_PDEATHSIG`` (the child and every
process it forks die with their parent); the walls (``walls``: namespaces, then process 1 of the new
PID namespace, a read-only root; or a network namespace alone where namespaces cannot be had);
resource limits (address space, CPU seconds, file size, open files, processes, no core files); no
capabilities; the seccomp filter (``seccomp``); then an audit hook (``sys.addaudithook``, which
cannot be removed) that refuses, with a ``SandboxViolation`` and a "blocked" record: writes,
deletes, renames, chmods outside the working directory; internet sockets and name look-ups;
signals to processes outside the sandbox's session; running other executables (exec, spawn,
``subprocess``, ``os.system``); loading C libraries with ``ctypes``; and forks beyond the process
budget (tokens in a pipe shared by every process of the sandbox, one taken per fork).

Test styles: ``assert`` runs the program, then each test snippet in its namespace (a HumanEval
``check(candidate)`` is called on the entry point); ``io`` runs the program once per test with
``sys.stdin`` holding the input and ``sys.stdout`` captured, and sends the output back: the parent
compares it, so this child never sees an expected output.
"""

import _signal as signal  # the C module: ``signal`` would import enum (~4 ms)
import marshal
import os
import resource
import sys

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = {  # audit event -> indices of its path arguments
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.chmod": (0,),
    "os.chown": (0,), "os.link": (0, 1), "os.symlink": (1,), "os.truncate": (0,), "os.utime": (0,),
    "shutil.rmtree": (0,), "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.move": (0, 1),
    "os.mkfifo": (0,), "os.mknod": (0,), "os.setxattr": (0,), "os.removexattr": (0,),
}
_NO_EXEC = ("os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen", "os.forkpty",
            "os.startfile", "pty.spawn")
_FORKS = ("os.fork",)
_NO_CTYPES = ("ctypes.dlopen", "ctypes.dlsym")
_NO_NET = ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.gethostbyname_ex")


class SandboxViolation(PermissionError):
    """An operation the sandbox refuses (the message names it)."""


class TestTimeout(BaseException):
    """A test ran past its time limit (BaseException, so a bare ``except Exception`` does not hide it)."""


class OutputLimit(BaseException):
    """A test's captured output passed the output limit."""


def main() -> None:
    spec = marshal.loads(read_all(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    nonce, out_fd = spec["nonce"], spec["result_fd"]

    def emit(**record):
        record["pid"] = os.getpid()  # the parent keeps only the first process's records
        line = nonce + "\t" + to_json(record) + "\n"
        try:
            os.write(out_fd, line.encode("utf-8", "replace"))
        except OSError:
            pass

    limits = spec["limits"]
    layers = lock_in(limits, spec.get("root_dir", ""))
    missing = [name for name in limits.get("require", ()) if layers.get(name) is not True]
    emit(ev="start", network_isolated=layers["network"] is True, layers=layers, missing=missing)
    if missing:  # fail closed: nothing runs without the walls it was asked to have
        os._exit(3)
    if limits.get("audit_hook", True):
        install_guard(os.getcwd(), limits, emit)
    del spec["nonce"]
    if spec["mode"] == "io":
        run_io(spec, emit)
    else:
        run_asserts(spec, emit)
    emit(ev="done", peak_mb=peak_mb())
    sys.stdout.flush()
    os._exit(0)


def read_all(fd) -> bytes:
    parts = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)


_ESCAPES = {i: "\\u%04x" % i for i in range(32)}
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\"})


def to_json(value) -> str:
    """JSON of a record (dicts, lists, text, numbers, booleans, None); anything else as its text."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(value) if value - value == 0 else "null"  # inf and nan are not JSON
    if isinstance(value, dict):
        return "{" + ",".join(to_json(str(k)) + ":" + to_json(v) for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    return '"' + str(value).translate(_ESCAPES) + '"'


def lock_in(limits, root_dir) -> dict:
    """PDEATHSIG, the walls (``walls``), resource limits, the seccomp filter; {layer: True | why not}."""
    import ctypes

    import seccomp
    import walls

    libc = ctypes.CDLL(None, use_errno=True)
    parent = [limits["parent_pid"]]

    def forking():
        parent[0] = os.getpid()

    def die_with_parent():
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() not in (parent[0], 0):  # the parent died before the line above
            os._exit(137)  # (0: the parent is outside our PID namespace, as for process 1 there)

    die_with_parent()
    os.register_at_fork(before=forking, after_in_child=die_with_parent)
    layers = build_walls(walls, limits, root_dir)
    if layers["namespaces"] is True:
        walls.drop_capabilities()
    set_limits(limits)
    layers["seccomp"] = seccomp.install() or True
    for mod in [m for m in sys.modules if m in ("ctypes", "walls", "seccomp") or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[mod]  # a program's own `import ctypes` re-imports it, which the guard refuses
    return layers


def build_walls(walls, limits, root_dir) -> dict:
    """Namespaces (then process 1 of the new PID namespace, forked here) and the read-only root;
    {layer: True | why not} for namespaces, root, network."""
    network = bool(limits.get("isolate_network", True))
    held, why = walls.unshare(network)
    layers = {"namespaces": True if held else why, "root": "needs the namespaces", "proc": "needs the namespaces"}
    if not held:
        layers["network"] = True if network and walls.network_alone() else "isolate_network is off" if not \
            network else "unshare(CLONE_NEWNET) refused"
        return layers
    layers["network"] = True if network else "isolate_network is off"
    walls.be_init()
    try:
        built = walls.build_root(root_dir, limits["disk_mb"], walls.python_dirs())
        layers["root"], layers["proc"] = True, built["proc"]
    except (OSError, ValueError) as err:
        layers["root"] = layers["proc"] = f"{type(err).__name__}: {err}"
    return layers


def set_limits(limits) -> None:
    mib = 1 << 20
    for name, value in (("RLIMIT_AS", limits["memory_mb"] * mib), ("RLIMIT_CPU", limits["cpu_s"]),
                        ("RLIMIT_FSIZE", limits["file_mb"] * mib), ("RLIMIT_NOFILE", limits["open_files"]),
                        ("RLIMIT_NPROC", limits["processes"]), ("RLIMIT_CORE", 0)):
        which = getattr(resource, name, None)
        if which is not None:
            try:
                resource.setrlimit(which, (value, value))
            except (ValueError, OSError):
                soft, hard = resource.getrlimit(which)
                resource.setrlimit(which, (min(value, hard) if hard >= 0 else value, hard))


def install_guard(home, limits, emit) -> None:
    """The audit hook (module doc); ``home`` is the one directory a program may change."""
    tokens_r, tokens_w = os.pipe()
    os.write(tokens_w, b"x" * max(0, int(limits["processes"]) - 1))
    os.close(tokens_w)
    os.set_blocking(tokens_r, False)
    sys.addaudithook(_Guard(os.path.realpath(home), os.getsid(0), tokens_r, int(limits["processes"]), emit))
    if hasattr(signal, "pidfd_send_signal"):
        delattr(signal, "pidfd_send_signal")


class _Guard:
    """The audit hook: refuses what the module doc lists, recording each refusal."""

    def __init__(self, root, session, tokens, processes, emit):
        self.root, self.session, self.tokens, self.processes, self.emit = root, session, tokens, processes, emit

    def __call__(self, event, args):
        if event == "open":
            path, _mode, flags = args
            if flags is not None and flags & _WRITE_FLAGS and not self.inside(path):
                self.refuse(f"writing {path!r} outside the sandbox directory")
        elif event in _PATH_EVENTS:
            for i in _PATH_EVENTS[event]:
                if i < len(args) and args[i] is not None and not self.inside(args[i]):
                    self.refuse(f"{event} on {args[i]!r} outside the sandbox directory")
        elif event in ("os.kill", "os.killpg"):
            if not self.same_session(args[0] if event == "os.kill" else -args[0]):
                self.refuse(f"{event}({args[0]}) outside the sandbox")
        elif event in _FORKS:
            self.take_token()
        elif event.startswith(_NO_EXEC):
            self.refuse(f"running another program ({event})")
        elif event in _NO_CTYPES or (event == "import" and args[0] in ("ctypes", "_ctypes")):
            self.refuse("loading C code with ctypes")
        elif event == "socket.__new__" and len(args) > 1 and args[1] not in (-1, 1):  # 1 = AF_UNIX
            self.refuse("opening a network socket")
        elif event in ("socket.connect", "socket.bind", "socket.sendto") and isinstance(args[1], tuple):
            self.refuse(f"{event} to {args[1]!r}")
        elif event in _NO_NET:
            self.refuse(f"network name look-up ({event})")

    def refuse(self, what):
        self.emit(ev="blocked", what=what)
        raise SandboxViolation(f"sandbox: {what} is not allowed")

    def inside(self, path) -> bool:
        """Whether ``path`` (relative to the current directory) lies strictly inside the root."""
        if isinstance(path, int):
            return True  # an already open descriptor
        p = os.fspath(path)
        p = p.decode("utf-8", "replace") if isinstance(p, bytes) else p
        if p in (os.devnull, "/dev/stdout", "/dev/stderr"):
            return True
        return os.path.realpath(p).startswith(self.root + os.sep)  # not the root itself: it may not be removed

    def same_session(self, pid) -> bool:
        """Whether a signal to ``pid`` (kill's conventions: 0, -pgid, -1) stays inside the sandbox."""
        if pid == 0:
            return True
        if pid < 0:
            return pid != -1 and -pid == os.getpgid(0)
        try:
            return os.getsid(pid) == self.session
        except OSError:
            return True  # no such process: let the call fail by itself

    def take_token(self):
        try:
            taken = os.read(self.tokens, 1)
        except BlockingIOError:
            taken = b""
        if not taken:
            self.refuse(f"more than {self.processes} processes")


def peak_mb() -> float:
    """This process's peak resident memory (VmHWM: counted from exec, unlike ru_maxrss)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        pass
    return -1.0


def kind_of(err: BaseException) -> str:
    """The reason code of an exception raised by a program or a test."""
    if isinstance(err, SandboxViolation):
        return "forbidden"
    if isinstance(err, MemoryError):
        return "memory"
    if isinstance(err, TestTimeout):
        return "timeout"
    if isinstance(err, OutputLimit):
        return "output_limit"
    if isinstance(err, AssertionError):
        return "wrong_output"
    if isinstance(err, SystemExit):
        return "exit_before_tests"
    return "runtime_error"


def describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"[:300]


def timed(seconds, fn, *args):
    """``fn(*args)`` under a wall-clock alarm that raises ``TestTimeout``."""
    def on_alarm(*_):
        raise TestTimeout(f"over {seconds:g} s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def compiled(source, emit):
    try:
        return compile(source, "<program>", "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as err:
        emit(ev="program", ok=False, error="syntax_error", msg=describe(err))
        return None


def run_asserts(spec, emit) -> None:
    """Run the program once, then each test in its namespace (``check(entry_point)`` when asked)."""
    code = compiled(spec["source"], emit)
    if code is None:
        return
    limit = spec["limits"]["test_s"]
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        timed(limit, exec, code, ns)
    except BaseException as err:  # noqa: BLE001 - the program's failure is the verdict
        emit(ev="program", ok=False, error=kind_of(err), msg=describe(err))
        return
    emit(ev="program", ok=True)
    entry = spec.get("entry_point") or ""
    for i, test in enumerate(spec["tests"]):
        try:
            timed(limit, run_one_assert, test, ns, entry, spec.get("call_check", False))
            emit(ev="test", i=i, ok=True)
        except BaseException as err:  # noqa: BLE001
            kind = "exit_during_tests" if isinstance(err, SystemExit) else kind_of(err)
            emit(ev="test", i=i, ok=False, error=kind, msg=describe(err))


def run_one_assert(test, ns, entry, call_check) -> None:
    exec(compile(test, f"<test>", "exec"), ns)
    if call_check:
        if entry not in ns:
            raise NameError(f"the program defines no '{entry}'")
        ns["check"](ns[entry])


class _Capture:
    """A text stream that keeps at most ``limit`` characters and raises ``OutputLimit`` past it."""

    def __init__(self, limit):
        self.parts, self.size, self.limit = [], 0, limit

    def write(self, text):
        self.size += len(text)
        if self.size > self.limit:
            raise OutputLimit(f"over {self.limit} characters of output")
        self.parts.append(text)
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False


def run_io(spec, emit) -> None:
    """Run the program once per test, stdin = the test's input; send back what it printed."""
    import io

    code = compiled(spec["source"], emit)
    if code is None:
        return
    emit(ev="program", ok=True)
    limits = spec["limits"]
    real_stdin, real_stdout = sys.stdin, sys.stdout
    for i, stdin_text in enumerate(spec["inputs"]):
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin_text.encode("utf-8")), encoding="utf-8")
        sys.stdout = capture = _Capture(limits["output_chars"])
        error = msg = None
        try:
            timed(limits["test_s"], exec, code, {"__name__": "__main__", "__builtins__": __builtins__})
        except SystemExit as err:
            if err.code not in (None, 0):
                error, msg = "runtime_error", f"exit status {err.code}"
        except BaseException as err:  # noqa: BLE001
            error, msg = kind_of(err), describe(err)
        finally:
            sys.stdin, sys.stdout = real_stdin, real_stdout
        emit(ev="test", i=i, output="".join(capture.parts), error=error, msg=msg)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # walls, seccomp: loaded by lock_in
    import seccomp  # noqa: F401 - imported while the files are still visible
    import walls  # noqa: F401
    del sys.path[0]
    main()
