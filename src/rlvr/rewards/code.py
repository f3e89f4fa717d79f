"""The ``code`` verifier: run a completion against its problem's tests in the sandbox.

A problem's tests live in ``Problem.meta["code"]`` (or, as JSON, in ``Problem.answer``):
``{"mode": "assert", "tests": [snippet, ...], "prefix": str, "entry_point": str, "call_check": bool}``
or ``{"mode": "io", "io": [{"input": str, "output": str}, ...], "prefix": str}``
(``rlvr.tasks.code_rows`` builds them from HumanEval, MBPP and plain rows). The program is the
completion's first fenced Python block (or the whole completion), joined to ``prefix`` as HumanEval
does: a body (its first line indented) is appended to the prompt's function header; a whole
program (its first line at column 0) follows the prompt, keeping its imports and helpers.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from rlvr.plugin import Plugin
from rlvr.registry import param, register
from rlvr.sandbox.isolation import required, setting
from rlvr.sandbox.run import LAYERS, Limits, RunResult, run_program
from rlvr.types import Problem, Score

EXTRACTS = ("auto", "full")
REASONS = ("syntax_error", "timeout", "memory", "output_limit", "forbidden", "runtime_error", "wrong_output",
           "exit_before_tests", "exit_during_tests", "too_long")
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class CodeConfig:
    timeout_s: float = param(5.0, "wall-clock limit of one verification: the program and all its tests are "
                                  "stopped at 90% of it, so a verifier pool with the same limit never fires first")
    test_timeout_s: float = param(2.0, "wall-clock limit of one test (and of the program's top level)")
    memory_mb: int = param(1024, "address-space limit of the program in MiB (RLIMIT_AS)")
    cpu_s: int = param(0, "CPU-seconds limit (RLIMIT_CPU); 0 = timeout_s rounded up")
    file_mb: int = param(16, "largest file the program may write, MiB (RLIMIT_FSIZE)")
    open_files: int = param(64, "open file descriptors (RLIMIT_NOFILE)")
    processes: int = param(8, "processes in all, the first included (counted by the sandbox; RLIMIT_NPROC "
                              "is set too, but root ignores it)")
    output_bytes: int = param(1 << 20, "stdout / stderr / one io test's output cap; past it the run stops")
    isolate_network: bool = param(True, "run in a new network namespace where the OS allows it (meta "
                                        "network_isolated says whether it did); sockets are refused anyway")
    site_packages: bool = param(False, "let programs import installed packages (numpy, ...); default stdlib only")
    work_root: str = param("", "folder for the per-program temporary directories ('' = the system temp dir)")
    partial: bool = param(False, "score the fraction of tests passed (meta partial: true) instead of 0 when "
                                 "some fail; a forbidden operation still scores 0")
    extract: str = param("auto", "auto: the first fenced ```python block when there is one, else the whole "
                                 "completion | full: always the whole completion")
    max_chars: int = param(100_000, "longer completions score 0 unrun, with the reason recorded")

    def __post_init__(self) -> None:
        if self.extract not in EXTRACTS:
            raise ValueError(f"code verifier: extract must be one of {EXTRACTS}, got {self.extract!r}")
        if not self.timeout_s > 0 or not self.test_timeout_s > 0 or self.max_chars < 1 or self.cpu_s < 0:
            raise ValueError(f"code verifier: need timeout_s > 0, test_timeout_s > 0, max_chars >= 1 and "
                             f"cpu_s >= 0, got {self.timeout_s}, {self.test_timeout_s}, {self.max_chars}, "
                             f"{self.cpu_s}")
        Limits(memory_mb=self.memory_mb, file_mb=self.file_mb, open_files=self.open_files,
               processes=self.processes, output_bytes=self.output_bytes)  # the remaining limits are checked there

    def limits(self) -> Limits:
        return Limits(timeout_s=0.9 * self.timeout_s, test_timeout_s=min(self.test_timeout_s, 0.9 * self.timeout_s),
                      memory_mb=self.memory_mb, cpu_s=self.cpu_s or math.ceil(self.timeout_s),
                      file_mb=self.file_mb, open_files=self.open_files, processes=self.processes,
                      output_bytes=self.output_bytes, isolate_network=self.isolate_network,
                      site_packages=self.site_packages, work_root=self.work_root,
                      require=tuple(n for n in required(setting()) if self.isolate_network or n != "network"))


@register("verifier", "code")
class CodeVerifier(Plugin):
    """Runs a Python completion against its problem's tests in a sandboxed child process.

    Score 1.0 when every test passes; otherwise 0.0 (or, with ``partial``, the fraction passed and
    ``meta["partial"] = True``), ``meta["reason"]`` naming why (``REASONS``: syntax_error, timeout,
    memory, output_limit, forbidden, runtime_error, wrong_output, exit_before_tests, ...) and
    ``meta["detail"]`` the first failure's message. Meta also holds ``passed``, ``total``,
    ``network_isolated``, ``sandbox`` ({layer: held} for namespaces, root, seccomp, network), ``peak_mb``
    and ``leftover`` (processes alive after the kill; 0). A layer ``sandbox.require`` asks for that does
    not hold runs nothing: the call raises ``SandboxUnavailable`` (scored 0 with the error).
    Sandbox: ``rlvr.sandbox.run`` (limits, what it does not isolate: docs/code.md).
    Differs from the answer verifiers (``exact``, ``numeric``, ``math_verify``):
    - the gold is a test suite (``Problem.meta["code"]``), not an answer string;
    - the completion is executed, in a child process under OS limits, never in this process;
    - ``meta["error"]`` is kept for failures of the verifier itself (a problem without tests), so a
      wrong program is not counted as a verifier error.
    Shapes: one (problem, completion) → one Score.
    """

    Config: ClassVar[type] = CodeConfig
    gold_is_test_suite: ClassVar[bool] = True  # a dataset task reads test-suite rows for it (rlvr.tasks.code_rows)

    def score(self, problem: Problem, completion: str) -> Score:
        cfg = self.config
        if len(completion) > cfg.max_chars:
            return Score(0.0, None, {"reason": "too_long", "detail": f"completion has {len(completion)} characters, "
                                                                     f"over max_chars={cfg.max_chars}; not run"})
        try:
            spec = code_spec(problem)
        except ValueError as err:
            return Score(0.0, None, {"error": str(err)})
        source = join_program(spec.get("prefix", ""), extract_code(completion) if cfg.extract == "auto" else completion)
        job = {"mode": spec["mode"], "source": source, "entry_point": spec.get("entry_point", ""),
               "call_check": bool(spec.get("call_check"))}
        if spec["mode"] == "io":
            job["inputs"] = [str(t["input"]) for t in spec["io"]]
        else:
            job["tests"] = list(spec["tests"])
        expected = [str(t["output"]) for t in spec["io"]] if spec["mode"] == "io" else None
        n_tests = len(spec["io"] if spec["mode"] == "io" else spec["tests"])
        return verdict(run_program(job, cfg.limits()), expected, cfg.partial, source, n_tests)

    __call__ = score

    def warm_up(self) -> None:
        """Nothing to build (the sandbox starts a fresh interpreter per program)."""


def code_spec(problem: Problem) -> dict[str, Any]:
    """The problem's test spec (meta "code", else JSON in ``answer``), checked; ValueError says what is wrong."""
    spec = problem.meta.get("code") if isinstance(problem.meta, dict) else None
    if spec is None and isinstance(problem.answer, str) and problem.answer.lstrip().startswith("{"):
        try:
            spec = json.loads(problem.answer)
        except ValueError:
            spec = None
    where = f"problem {problem.uid or problem.prompt[:40]!r}"
    if not isinstance(spec, dict):
        raise ValueError(f"code verifier: {where} has no tests (Problem.meta['code'] or a JSON answer with "
                         f"'mode' and 'tests' / 'io')")
    mode = spec.get("mode", "io" if "io" in spec else "assert")
    key = "io" if mode == "io" else "tests"
    items = spec.get(key)
    if mode not in ("assert", "io") or not isinstance(items, list) or not items:
        raise ValueError(f"code verifier: {where}: spec needs mode 'assert' with a non-empty 'tests' list or "
                         f"mode 'io' with a non-empty 'io' list; got mode {mode!r} and {key}={items!r:.80}")
    if mode == "io" and not all(isinstance(t, dict) and "input" in t and "output" in t for t in items):
        raise ValueError(f"code verifier: {where}: every io test needs 'input' and 'output'")
    return {**spec, "mode": mode}


def extract_code(completion: str) -> str:
    """The first fenced code block (```python ... ```, an unclosed one runs to the end), else the text."""
    found = _FENCE.search(completion)
    return found.group(1) if found else completion


def join_program(prefix: str, code: str) -> str:
    """``prefix + code`` for a body (first line indented), ``prefix`` then ``code`` for a whole program."""
    if not prefix:
        return code
    first = next((line for line in code.splitlines() if line.strip()), "")
    if first and not first[0].isspace():
        return prefix.rstrip("\n") + "\n\n" + code
    return prefix + code


def same_output(got: str, want: str) -> bool:
    """Outputs equal up to trailing spaces on each line and trailing blank lines."""
    def norm(text: str) -> list[str]:
        lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        return lines
    return norm(got) == norm(want)


def verdict(run: RunResult, expected: list[str] | None, partial: bool, source: str, total: int) -> Score:
    """The Score of a sandboxed run of ``total`` tests (io: their ``expected`` outputs): the tests
    passed, and the reason of the first failure."""
    start, program, done = run.first("start"), run.first("program"), run.first("done")
    tests = {r["i"]: r for r in run.records if r.get("ev") == "test" and isinstance(r.get("i"), int)}
    outcomes: list[tuple[bool, str | None, str]] = []
    for i in sorted(k for k in tests if 0 <= k < total):
        r = tests[i]
        if expected is not None:
            ok = r.get("error") is None and i < len(expected) and same_output(str(r.get("output", "")), expected[i])
            kind = r.get("error") or (None if ok else "wrong_output")
        else:
            ok, kind = bool(r.get("ok")), r.get("error")
        outcomes.append((ok, None if ok else (kind or "runtime_error"), str(r.get("msg") or "")))
    blocked = [str(r.get("what")) for r in run.records if r.get("ev") == "blocked"]
    reason, detail = _reason(run, program, done, outcomes, blocked)
    passed = sum(ok for ok, _, _ in outcomes)
    meta: dict[str, Any] = {"passed": passed, "total": total,
                            "network_isolated": bool(start and start.get("network_isolated")),
                            "sandbox": held_layers(start),
                            "peak_mb": done.get("peak_mb") if done else None, "leftover": run.leftover}
    if blocked:
        meta["blocked"] = blocked[:5]
    if reason is None and passed == total:
        return Score(1.0, source, meta)
    meta.update(reason=reason or "wrong_output", detail=detail[:300], stderr=run.stderr[-300:].decode("utf-8", "replace"))
    if partial and reason != "forbidden" and 0 < passed < total:
        return Score(passed / total, source, {**meta, "partial": True})
    return Score(0.0, source, meta)


def held_layers(start: dict | None) -> dict[str, bool]:
    """{layer: whether it held} from the child's start record (``rlvr.sandbox.run.LAYERS``)."""
    layers = start.get("layers", {}) if start else {}
    return {name: layers.get(name) is True for name in LAYERS}


def _reason(run: RunResult, program: dict | None, done: dict | None,
            outcomes: list[tuple[bool, str | None, str]], blocked: list[str]) -> tuple[str | None, str]:
    """The first thing that went wrong, (None, "") when nothing did."""
    if blocked:
        return "forbidden", blocked[0]
    if run.killed:
        return run.killed, f"stopped by the sandbox ({run.killed})"
    if program is not None and not program.get("ok"):
        return str(program.get("error") or "runtime_error"), str(program.get("msg") or "")
    failed = next(((kind, msg) for ok, kind, msg in outcomes if not ok), None)
    if failed is not None:
        return failed[0], failed[1]
    if done is None:
        if run.status is not None and run.status < 0:
            return ("timeout" if -run.status in (24, 9) else "runtime_error"), f"killed by signal {-run.status}"
        return "exit_before_tests", f"the program ended (status {run.status}) before its tests finished"
    return None, ""
