"""Tool calls inside rollouts: the policy may run Python (in the sandbox) or call user functions.

With the ``multi_turn`` sampler (``rollout.sampler: {name: multi_turn, params: {env: python_tool}}``)
each policy turn either calls a tool or answers. A call is ``<NAME>argument</NAME>``: ``<py>`` runs
the argument as a Python program in the sandbox (``rlvr.sandbox.run``; what it printed comes
back), and every function in ``tools`` (``"pkg.mod:func"``: ``func(argument: str) -> str``) is
callable under its own name. The result comes back as the next observation, as environment tokens
(``Origin.ENV``, never trained on), cut to ``max_output_chars``. A failing tool (an exception, a
program that raises, a time-out) answers with its error as text, never raising. A turn without a
call ends the episode: its text is the answer, scored by ``verifier``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from rlvr.envs.base import EnvError, Environment, register_env
from rlvr.registry import build, import_object, param
from rlvr.types import Problem

BUILTIN = "py"


@dataclass(frozen=True)
class PythonToolConfig:
    tools: list = param([], "user tools, 'pkg.module:function' each (called with the argument text, returns "
                            "text), named <function>...</function>; <py>...</py> (sandboxed Python) is always there")
    python: bool = param(True, "offer the built-in <py> tool (a program run in the sandbox; stdout comes back)")
    disabled: bool = param(False, "ablation: every call is answered 'error: tools are disabled' and not run "
                                  "(still counted in info calls and errors), so a policy is measured without its tools")
    max_calls: int = param(3, "tool calls per episode; later calls are answered with an error text, not run")
    max_output_chars: int = param(200, "a tool's reply is cut to this many characters (marked with '...')")
    result_format: str = param("\n<out>{output}</out>\n", "the observation after a call; {output} = the reply")
    verifier: str = param("math_verify", "scores the final answer (rlvr list verifier)")
    verifier_params: dict = param({}, "hyperparameters of the verifier")
    timeout_s: float = param(3.0, "wall-clock limit of one <py> program")
    memory_mb: int = param(512, "address-space limit of one <py> program, MiB")

    def __post_init__(self) -> None:
        if self.max_calls < 0 or self.max_output_chars < 1 or not self.timeout_s > 0:
            raise ValueError(f"python_tool: need max_calls >= 0, max_output_chars >= 1 and timeout_s > 0, got "
                             f"{self.max_calls}, {self.max_output_chars}, {self.timeout_s}")
        if "{output}" not in self.result_format:
            raise ValueError("python_tool: result_format must contain {output}")
        object.__setattr__(self, "tools", list(self.tools))


@register_env("python_tool")
class PythonTool(Environment):
    """Answer a problem, optionally after calling tools whose replies are shown as masked tokens.

    ``reset`` shows the problem prompt. ``step(action)``: the first ``<NAME>arg</NAME>`` in the
    action with a known NAME is run, its reply is the observation (score 0, not done); an action
    with no call is the answer: score = ``verifier.score(problem, action).value``, done. ``info``:
    ``calls``, ``errors`` (tool replies that were errors), ``answered``.
    Differs from ``refine_arithmetic``: observations are tool replies, not feedback on an attempt,
    and only the final answer is scored. Shapes: text in, text out.
    """

    Config = PythonToolConfig

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._tools: dict[str, Callable[[str], Any]] = {}
        for path in self.config.tools:
            fn = import_object(str(path), what="python_tool tool")
            if not callable(fn):
                raise EnvError(f"python_tool: tool '{path}' is not callable")
            self._tools[path.rpartition(":")[2]] = fn
        if self.config.python:
            self._tools.setdefault(BUILTIN, self._python)
        names = "|".join(re.escape(n) for n in self._tools) or "(?!)"
        self._call = re.compile(rf"<({names})>(.*?)</\1>", re.DOTALL)
        self._verifier: Any = None

    def reset(self, problem: Problem, seed: int) -> str:
        self._problem, self._done = problem, False
        self.info = {"calls": 0, "errors": 0, "answered": False}
        return problem.prompt

    def step(self, action: str) -> tuple[str, float, bool]:
        if not hasattr(self, "_problem"):
            raise EnvError("python_tool: step before reset")
        if self._done:
            raise EnvError("python_tool: step after the episode ended")
        found = self._call.search(action)
        if found is None:
            self._done = True
            self.info["answered"] = True
            return "", float(self._verifier_for().score(self._problem, action).value), True
        self.info["calls"] += 1
        if self.config.disabled:
            reply, failed = "error: tools are disabled", True
        elif self.info["calls"] > self.config.max_calls:
            reply, failed = f"error: at most {self.config.max_calls} tool calls per episode; answer now", True
        else:
            reply, failed = self._run(found.group(1), found.group(2))
        self.info["errors"] += int(failed)
        return self.config.result_format.format(output=clip(reply, self.config.max_output_chars)), 0.0, False

    def _run(self, name: str, argument: str) -> tuple[str, bool]:
        """(reply text, whether it is an error); never raises."""
        try:
            out = self._tools[name](argument)
            return ("" if out is None else str(out)), False
        except ToolError as err:  # a sandboxed program failed: its reason and message
            return f"error: {err}", True
        except Exception as err:  # noqa: BLE001 - a tool's failure is the policy's observation
            return f"error: {type(err).__name__}: {err}", True

    def _python(self, source: str) -> str:
        """Run ``source`` in the sandbox; its output, or its failure as an error (raised, caught by _run)."""
        from rlvr.sandbox.isolation import required, setting
        from rlvr.sandbox.run import Limits, run_program

        limits = Limits(timeout_s=self.config.timeout_s, test_timeout_s=self.config.timeout_s,
                        memory_mb=self.config.memory_mb, output_bytes=max(4096, self.config.max_output_chars),
                        require=required(setting()))
        run = run_program({"mode": "io", "source": source, "inputs": [""]}, limits)
        program, test = run.first("program"), run.first("test")
        blocked = [r.get("what") for r in run.records if r.get("ev") == "blocked"]
        if blocked:
            raise ToolError(f"forbidden: {blocked[0]}")
        if run.killed:
            raise ToolError(f"{run.killed}: stopped by the sandbox")
        if program is not None and not program.get("ok"):
            raise ToolError(f"{program.get('error')}: {program.get('msg')}")
        if test is None:
            raise ToolError("the program ended before it finished")
        if test.get("error"):
            raise ToolError(f"{test['error']}: {test.get('msg') or ''}")
        return str(test.get("output", ""))

    def _verifier_for(self) -> Any:
        if self._verifier is None:
            self._verifier = build("verifier", self.config.verifier, **self.config.verifier_params)
        return self._verifier


class ToolError(RuntimeError):
    """A sandboxed tool program failed (the message is what the policy reads)."""


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in '...' when it was longer."""
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."
