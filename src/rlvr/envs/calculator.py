"""A calculator tool and the arithmetic it helps with: the tiny model calls ``<calc>a*b</calc>``.

``calc`` is a ``python_tool`` user tool (``tools: ["rlvr.envs.calculator:calc"]``): it evaluates an
integer expression of ``+ - *`` and parentheses by walking its syntax tree (no ``eval``). The
``tool_arithmetic`` task poses ``a+b=`` / ``a*b=`` with multi-digit operands and no worked steps,
which the tiny model can hardly answer alone, and demonstrates an episode with a tool call: the call,
the environment's reply (masked in the warm start, as in rollouts) and the answer ``#value``.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass

from rlvr.envs.base import episode_of, episode_score
from rlvr.registry import param, register
from rlvr.tasks.base import Task, TaskConfig, answer_after_marker
from rlvr.types import Problem, Score

MAX_EXPR_CHARS = 64
MAX_DIGITS = 30  # an intermediate value longer than this is refused (no 9**9**9)
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}


def calc(expr: str) -> str:
    """The value of an integer expression over ``+ - *`` and parentheses, as text.

    Raises ValueError for anything else (names, calls, division, floats, > 64 characters, values
    over 30 digits); the ``python_tool`` environment turns that into an ``error: ...`` reply.
    """
    text = expr.strip()
    if not text or len(text) > MAX_EXPR_CHARS:
        raise ValueError(f"calc: need 1 to {MAX_EXPR_CHARS} characters, got {len(text)}")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as err:
        raise ValueError(f"calc: not an expression: {text!r}") from err
    return str(_value(tree.body))


def _value(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _value(node.operand) * (-1 if isinstance(node.op, ast.USub) else 1)
    elif isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        value = _OPS[type(node.op)](_value(node.left), _value(node.right))
    else:
        raise ValueError(f"calc: only integers, + - * and parentheses, got {type(node).__name__}")
    if len(str(abs(value))) > MAX_DIGITS:
        raise ValueError(f"calc: value over {MAX_DIGITS} digits")
    return value


@dataclass(frozen=True)
class ToolArithmeticConfig(TaskConfig):
    min_digits: int = param(3, "fewest digits of an operand")
    max_digits: int = param(4, "most digits of an operand")
    ops: str = param("+*", "operations drawn uniformly, one per problem: '+' and/or '*' (both operands multi-digit)")
    tool: str = param("calc", "the tool name demonstrations call (<calc>...</calc>); the environment's tool")
    tool_frac: float = param(1.0, "fraction of warm-start demonstrations that call the tool (by prompt hash); "
                                  "the rest write the answer directly")
    result_format: str = param("\n<out>{output}</out>\n", "the tool reply shown in demonstrations; must equal "
                                                           "the python_tool environment's result_format")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(f"tool_arithmetic: need 1 <= min_digits <= max_digits, got {self.min_digits}, "
                             f"{self.max_digits}")
        if not self.ops or set(self.ops) - set("+*"):
            raise ValueError(f"tool_arithmetic: ops must be a non-empty string over '+*', got '{self.ops}'")
        if not 0.0 <= self.tool_frac <= 1.0:
            raise ValueError(f"tool_arithmetic: tool_frac must be in [0, 1], got {self.tool_frac}")
        if "{output}" not in self.result_format:
            raise ValueError("tool_arithmetic: result_format must contain {output}")


@register("task", "tool_arithmetic")
class ToolArithmetic(Task):
    """``4821*307=`` answered ``#1480047``, ideally after ``<calc>4821*307</calc>``.

    With the ``multi_turn`` sampler and the ``python_tool`` environment (tool ``calc``), a row is
    scored by its episode reward (the environment verifies the final answer); a single completion
    (plain evaluation) is right when the digits after its last ``#`` are the answer.
    :meth:`demonstration_turns` gives the warm start a whole episode: ``[(call, True), (reply,
    False), ("#value", True)]`` (True = the policy's turn, trained; False = environment tokens,
    masked), or ``[("#value", True)]`` for the ``1 - tool_frac`` demonstrations that answer directly.
    Differs from ``arithmetic``: no worked steps; both operands are multi-digit.
    """

    Config = ToolArithmeticConfig
    needs_timeout = False  # string and integer checks
    max_new_tokens = 24

    def sample(self, rng: random.Random) -> Problem:
        cfg = self.config
        a, b = (rng.randint(10 ** (d - 1), 10**d - 1) for d in (rng.randint(cfg.min_digits, cfg.max_digits)
                                                               for _ in range(2)))
        op = rng.choice(cfg.ops)
        value = a + b if op == "+" else a * b
        return Problem(prompt=f"{a}{op}{b}=", answer=str(value), meta={"operands": [a, b], "op": op})

    def verify(self, problem: Problem, completion: str) -> Score:
        episode = episode_score(problem, {"called": float(bool((episode_of(problem) or {}).get("info", {})
                                                               .get("calls")))})
        if episode is not None:
            return episode
        parsed = answer_after_marker(completion)
        return Score(1.0 if parsed == problem.answer else 0.0, parsed)

    def calls_tool(self, problem: Problem) -> bool:
        """Whether this problem's demonstration calls the tool (a fixed draw per prompt)."""
        return random.Random(f"tool_arithmetic:{problem.prompt}").random() < self.config.tool_frac

    def demonstration_turns(self, problem: Problem) -> list[tuple[str, bool]]:
        """The episode as (text, is_policy) turns; each policy turn ends with eos in the warm start."""
        answer = f"#{problem.answer}"
        if not self.calls_tool(problem):
            return [(answer, True)]
        name, expr = self.config.tool, problem.prompt.rstrip("=")
        return [(f"<{name}>{expr}</{name}>", True), (self.config.result_format.format(output=problem.answer), False),
                (answer, True)]

    def demonstration(self, problem: Problem) -> str:
        """The demonstration's final answer (``#value``); the whole episode is :meth:`demonstration_turns`."""
        return f"#{problem.answer}"
