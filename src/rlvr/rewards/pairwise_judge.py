"""Pairwise judgements: a language model is shown two solutions of one problem and names the sounder one.

Used by OM-GRPO's contrast term (``rlvr.rewards.om_grpo``); the model is reached through the
:class:`~rlvr.rewards.chat_client.ChatClient` (an OpenAI-compatible HTTP server, a local
checkpoint, or the policy itself passed in).
"""

from __future__ import annotations

import re
import threading
from typing import Any

from rlvr.rewards.chat_client import ChatClient
from rlvr.types import Problem

DEFAULT_PAIR_TEMPLATE = (
    "Two solutions to the same problem follow.\n"
    "Problem: {problem}\n"
    "Solution A:\n{a}\n"
    "Solution B:\n{b}\n"
    "Which solution has the sounder reasoning? Answer with one line, exactly 'better: A' or 'better: B'."
)
_PREFERENCE = re.compile(r"(?:better|sounder|winner|answer|choice)\s*(?:solution)?\s*(?:is|:|=|-)?\s*\(?\b([ab])\b")
_ALONE = re.compile(r"^\(?(?:solution\s+)?([ab])\)?[.!]?$")


def parse_preference(reply: str) -> float | None:
    """1.0 when a reply prefers solution A, 0.0 for B, None when it names neither (unparsable).

    Reads the last "better: A|B" phrase (also "sounder", "winner", "answer", "choice"; a
    ``<think>`` block removed, markdown ignored); failing that, a reply that is only "A" or "B".
    """
    text = re.sub(r"<think>.*?(</think>|$)", " ", reply, flags=re.DOTALL | re.IGNORECASE)
    text = re.sub(r"[*`'\"]", "", text).lower().strip()
    found = _PREFERENCE.findall(text)
    if not found:
        alone = _ALONE.match(text)
        found = [alone.group(1)] if alone else []
    if not found:
        return None
    return 1.0 if found[-1] == "a" else 0.0


class PairwiseJudge:
    """P(a is the sounder reasoning) for a pair of completions, from a chat model's verdicts.

    With ``both_orders`` the pair is asked as (a, b) and as (b, a) and the two verdicts are averaged,
    which cancels a judge's preference for a position; a failed or unparsable verdict is left out,
    and with none left the pair is a tie (0.5). ``stats`` counts calls, unparsable replies and errors.
    """

    def __init__(self, client: ChatClient, template: str = DEFAULT_PAIR_TEMPLATE, both_orders: bool = True) -> None:
        self.client, self.template, self.both_orders = client, template, both_orders
        self.stats = {"calls": 0, "unparsable": 0, "error": 0}
        self._lock = threading.Lock()

    def __call__(self, problem: Problem, text_a: str, text_b: str) -> float:
        votes = [self._vote(problem, text_a, text_b)]
        if self.both_orders:
            swapped = self._vote(problem, text_b, text_a)
            votes.append(None if swapped is None else 1.0 - swapped)
        known = [v for v in votes if v is not None]
        return sum(known) / len(known) if known else 0.5

    def _vote(self, problem: Problem, a: str, b: str) -> float | None:
        self._count("calls")
        try:
            reply = self.client.ask(self.template.format(problem=problem.prompt, a=a, b=b))
        except Exception:  # noqa: BLE001 — a judge failure must not stop training: the pair is a tie
            self._count("error")
            return None
        vote = parse_preference(reply)
        if vote is None:
            self._count("unparsable")
        return vote

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def pop_stats(self) -> dict[str, Any]:
        """The counts since the last call (and reset them)."""
        with self._lock:
            out, self.stats = self.stats, {k: 0 for k in self.stats}
        return out
