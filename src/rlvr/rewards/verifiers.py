"""Answer verifiers with an enforced time limit: exact string match, numeric tolerance, math-verify.

Every verifier's :meth:`Verifier.score` (also ``verifier(problem, completion)``) never hangs or
raises: completions over ``max_chars`` score 0 unread; the check itself runs through
:func:`rlvr.sandbox.safe.safe_verify` with ``timeout_s`` and ``isolation``; a time-out or an error
scores 0 with ``Score.meta["error"]`` holding the reason (the trainer counts these as
``reward/verifier_errors`` and prints them with the samples).

Isolation: ``"thread"`` is cheap (~0.1 ms) but Python cannot interrupt a thread that holds the
interpreter lock inside one C call, such as sympy raising 9 to a 10^8-digit power, so only the
bounded string checks (``exact``, ``numeric``) default to it. ``math_verify`` defaults to
``"process"`` (a forked child killed at the limit, ~6 ms a call): a hard limit from any thread,
which math-verify's own ``signal.alarm`` limit is not (it works only in the main thread, in whole
seconds, and turns a time-out into a silent "wrong"). So math-verify runs here with its own limit
off and ours on. In a verifier pool worker (``rlvr.sandbox.pool``, how training verifies a batch) the
pool is the hard limit, so there the check runs directly: no thread, no second fork.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from rlvr.plugin import Plugin
from rlvr.registry import param, register
from rlvr.rewards.answer import EXTRACT_MODES, extract_answer, normalise, strip_confidence
from rlvr.sandbox.safe import ISOLATIONS, quiet_math_verify, safe_verify
from rlvr.types import Problem, Score


@dataclass(frozen=True)
class VerifierConfig:
    timeout_s: float = param(5.0, "time limit of one check in seconds (<= 0: no limit, errors still caught)")
    isolation: str = param("thread", "'thread' (cheap, cannot stop a computation stuck in C) or 'process' "
                                     "(forked child killed at the limit)")
    max_chars: int = param(100_000, "longer completions score 0 unread, with the reason recorded")
    max_nesting: int = param(100, "completions whose brackets ( [ { nest deeper score 0 unread, with the reason")
    strip_confidence: bool = param(True, "drop a stated 'confidence: 0.8' (C3RL format) before reading the answer")
    extract: str = param("auto", "where the answer is: auto (last \\boxed{}, else after `marker`, else the "
                                 "last line) | boxed | marker | full (the whole completion)")
    marker: str = param("answer:", "answer marker for extract=auto|marker (case-insensitive)")

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATIONS:
            raise ValueError(f"verifier: isolation must be one of {ISOLATIONS}, got '{self.isolation}'")
        if self.extract not in EXTRACT_MODES:
            raise ValueError(f"verifier: extract must be one of {EXTRACT_MODES}, got '{self.extract}'")
        if self.max_chars < 1 or self.max_nesting < 1:
            raise ValueError(f"verifier: max_chars and max_nesting must be >= 1, got {self.max_chars}, "
                             f"{self.max_nesting}")


class Verifier(Plugin, ABC):
    """Scores a completion against ``problem.answer``: 1.0 right, 0.0 wrong or failed (reason in meta)."""

    Config: ClassVar[type] = VerifierConfig

    def score(self, problem: Problem, completion: str) -> Score:
        """The verdict, within ``timeout_s`` (plus the fork or thread start-up)."""
        cfg = self.config
        if len(completion) > cfg.max_chars:
            return Score(0.0, None, {"error": f"completion has {len(completion)} characters, over "
                                              f"max_chars={cfg.max_chars}; not read"})
        depth = nesting_depth(completion)
        if depth > cfg.max_nesting:
            return Score(0.0, None, {"error": f"brackets nest {depth} deep, over max_nesting={cfg.max_nesting}; "
                                              f"not read"})
        if problem.answer is None:
            return Score(0.0, None, {"error": f"problem {problem.uid or problem.prompt[:40]!r} has no gold answer"})
        text = strip_confidence(completion) if cfg.strip_confidence else completion
        return safe_verify(self.check, problem, text, cfg.timeout_s, cfg.isolation)

    __call__ = score

    @abstractmethod
    def check(self, problem: Problem, text: str) -> Score:
        """The unguarded check (may raise or run long; ``score`` guards it)."""

    def answer(self, text: str) -> str | None:
        return extract_answer(text, self.config.extract, self.config.marker)


def nesting_depth(text: str) -> int:
    """The deepest nesting of ( [ { in ``text`` (closing brackets of any kind close one level)."""
    depth = deepest = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}" and depth:
            depth -= 1
    return deepest


@register("verifier", "exact")
class ExactVerifier(Verifier):
    """Normalised string equality of the extracted answer and the gold answer.

    Normalisation: case-folded, whitespace collapsed, enclosing ``$`` and a trailing ``.`` dropped
    (``" $Paris$. "`` equals ``"paris"``). Differs from ``numeric``: ``17.0`` is not ``17``.
    Shapes: one (problem, completion) → one Score.
    """

    def check(self, problem: Problem, text: str) -> Score:
        got = self.answer(text)
        ok = got is not None and normalise(got) == normalise(str(problem.answer))
        return Score(1.0 if ok else 0.0, got)


# A decimal number, with optional thousands commas, decimals and exponent; or a simple fraction a/b.
_NUMBER = re.compile(r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
                     r"(?:\s*/\s*[-+]?\d+(?:\.\d+)?)?")


@dataclass(frozen=True)
class NumericConfig(VerifierConfig):
    abs_tol: float = param(1e-6, "absolute tolerance: right when |pred - gold| <= max(abs_tol, rel_tol*|gold|)")
    rel_tol: float = param(1e-6, "relative tolerance (see abs_tol)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.abs_tol < 0 or self.rel_tol < 0:
            raise ValueError(f"numeric: tolerances must be >= 0, got abs_tol={self.abs_tol}, rel_tol={self.rel_tol}")


@register("verifier", "numeric")
class NumericVerifier(Verifier):
    """The last number of the extracted answer equals the gold number within a tolerance.

    Right when ``|pred − gold| ≤ max(abs_tol, rel_tol·|gold|)``. Numbers: ``-12``, ``1,234.5``,
    ``2.5e3``, ``3/4``. A gold answer that is not a number is an error (score 0, reason recorded).
    Shapes: one (problem, completion) → one Score.
    """

    Config = NumericConfig

    def check(self, problem: Problem, text: str) -> Score:
        gold = to_number(str(problem.answer))
        if gold is None:
            raise ValueError(f"gold answer {str(problem.answer)[:40]!r} is not a number")
        region = self.answer(text)
        found = last_number(region) if region is not None else None
        pred = to_number(found) if found is not None else None
        if pred is None:
            return Score(0.0, found)
        tol = max(self.config.abs_tol, self.config.rel_tol * abs(gold))
        return Score(1.0 if math.isfinite(pred) and abs(pred - gold) <= tol else 0.0, found)


def last_number(text: str) -> str | None:
    """The last number-looking span of ``text`` (see ``_NUMBER``), or None."""
    last = None
    for last in _NUMBER.finditer(text):
        pass
    return None if last is None else last.group(0).strip()


def to_number(text: str) -> float | None:
    """``text`` as a float (commas dropped, ``a/b`` divided), or None when it is not a number."""
    s = text.strip().strip("$").replace(",", "").replace(" ", "")
    num, _, den = s.partition("/")
    try:
        value = float(num) / float(den) if den else float(num)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return value


@dataclass(frozen=True)
class MathVerifyConfig(VerifierConfig):
    isolation: str = param("process", "'process' (default: a hard limit, needed for sympy's big powers) or "
                                      "'thread' (cheap; cannot stop a computation stuck in C)")
    extract: str = param("full", "what math-verify reads: full (default; it finds \\boxed{} and final "
                                 "answers itself) | auto | boxed | marker")
    float_rounding: int = param(6, "math_verify.verify float_rounding: decimal places numbers are rounded to "
                                   "before comparing (6: 1.0000001 equals 1)")
    strict: bool = param(True, "math_verify.verify strict: False also accepts a bare value for a gold equation "
                               "(gold 'x = 1', answer '1') and compares sets more loosely")
    allow_set_relation_comp: bool = param(False, "math_verify.verify allow_set_relation_comp: a set and an "
                                                 "inequality describing it are equal ((1,2] vs 1 < x <= 2)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.float_rounding < 0:
            raise ValueError(f"math_verify: float_rounding must be >= 0, got {self.float_rounding}")


@register("verifier", "math_verify")
class MathVerifyVerifier(Verifier):
    """Symbolic equivalence of LaTeX or plain answers with the ``math-verify`` package.

    ``0.5`` equals ``\\frac{1}{2}``; a gold answer math-verify cannot parse is compared as
    normalised text (noted in ``Score.meta["note"]``). The time limit is ours (``safe_verify``):
    math-verify's own signal limit is switched off (module doc). Shapes: one (problem,
    completion) → one Score.
    """

    Config = MathVerifyConfig

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        from math_verify import parse  # imported (and its grammar built) once here, not in every forked child

        quiet_math_verify()  # its limit is off on purpose (module doc); ours is on
        parse("$1$", parsing_timeout=None)

    def check(self, problem: Problem, text: str) -> Score:
        from math_verify import parse, verify  # optional dependency: rlvr[data]

        gold_text = str(problem.answer)
        gold = parse(gold_text, parsing_timeout=None) or parse(f"${gold_text}$", parsing_timeout=None)
        region = self.answer(text)
        pred = parse(region, parsing_timeout=None) if region else []
        parsed = str(pred[-1]) if pred else None
        if not gold:
            ok = parsed is not None and normalise(parsed) == normalise(gold_text)
            return Score(1.0 if ok else 0.0, parsed, {"note": "gold answer did not parse; compared as text"})
        cfg = self.config
        ok = pred and verify(gold, pred, float_rounding=cfg.float_rounding, strict=cfg.strict,
                             allow_set_relation_comp=cfg.allow_set_relation_comp, timeout_seconds=None)
        return Score(1.0 if ok else 0.0, parsed)


def build_verifier(name: str, **params: Any) -> Verifier:
    """A registered verifier by name (``exact``, ``numeric``, ``math_verify`` or ``pkg.mod:Class``)."""
    from rlvr.registry import build

    return build("verifier", name, **params)
