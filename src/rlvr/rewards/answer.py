"""Reading answers and stated confidences out of completions (pure string functions, bounded cost).

Stated confidence (C3RL's format, docs/methods.md §2.28): the completion ends with its answer followed by
``confidence: <value>``, e.g. ``... answer: 17 confidence: 0.8`` or, on the arithmetic testbed,
``...;#632 confidence: 0.8``. Accepted spellings: ``confidence`` or ``conf``, case-insensitive,
then an optional ``:`` or ``=``, then a number; ``<value>`` in [0, 1] is a probability, a value
followed by ``%`` or a bare value in (1, 100] is a percentage. The last statement wins. Anything
else (no statement, a value above 100, a negative one) is "no confidence stated" (None). Every
character used is printable ASCII, which the testbed's character tokenizer has.
"""

from __future__ import annotations

import re

# "conf"/"confidence" not glued to a preceding letter ("#632confidence: 0.8" still counts).
_CONFIDENCE = re.compile(r"(?<![A-Za-z])conf(?:idence)?\s*[:=]?\s*(\d{1,3}(?:\.\d{0,6})?|\.\d{1,6})\s*(%?)",
                         re.IGNORECASE)
_BOXED = "\\boxed{"
_SPACES = re.compile(r"\s+")


def parse_confidence(text: str) -> float | None:
    """The last stated confidence in ``text`` as a probability in [0, 1], or None (see module doc)."""
    last = None
    for last in _CONFIDENCE.finditer(text):
        pass
    if last is None:
        return None
    value, percent = float(last.group(1)), bool(last.group(2))
    if percent or value > 1.0:
        value /= 100.0
    return value if 0.0 <= value <= 1.0 else None


def strip_confidence(text: str) -> str:
    """``text`` without its confidence statements (so a verifier does not read 0.8 as the answer)."""
    return _CONFIDENCE.sub(" ", text).rstrip()


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (braces balanced), or None when there is none or it is unclosed."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def after_marker(text: str, marker: str) -> str | None:
    """The rest of the line after the last ``marker`` (case-insensitive), stripped; None if absent."""
    if not marker:
        return None
    at = text.lower().rfind(marker.lower())
    if at < 0:
        return None
    return text[at + len(marker):].split("\n", 1)[0].strip()


EXTRACT_MODES = ("auto", "boxed", "marker", "full")


def extract_answer(text: str, mode: str = "auto", marker: str = "answer:") -> str | None:
    """The answer part of a completion.

    ``auto``: the last ``\\boxed{...}``, else the line after the last ``marker``, else the last
    non-empty line; ``boxed`` / ``marker``: only that rule; ``full``: the whole text. None = no answer.
    """
    if mode not in EXTRACT_MODES:
        raise ValueError(f"extract_answer: unknown mode '{mode}'; valid: {', '.join(EXTRACT_MODES)}")
    if mode == "full":
        return text.strip() or None
    boxed = last_boxed(text) if mode in ("auto", "boxed") else None
    if boxed is not None or mode == "boxed":
        return boxed
    found = after_marker(text, marker)
    if found is not None or mode == "marker":
        return found or None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def normalise(answer: str) -> str:
    """Case-folded, whitespace-collapsed, without enclosing ``$`` or a trailing ``.``: the form the
    exact verifier compares."""
    s = _SPACES.sub(" ", answer).strip()
    for _ in range(2):  # "$17$." and "$17.$" alike
        s = s.rstrip(".").strip().strip("$").strip()
    return s.casefold()
