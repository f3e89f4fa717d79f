"""Supervision as state (DE-Venus, docs/methods.md §2.2): per problem, the label in use, where it came from,
how much it is trusted, and what training has seen of it.

``SupervisionState: uid → Record{label, source ∈ {gold, pseudo, corrected, none}, confidence,
visits, successes, rollouts, history, streak, candidate}``. Plain Python numbers and strings only,
so ``state_dict`` goes into a checkpoint's JSON and comes back bit for bit (exact resume).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

SOURCES = ("none", "gold", "pseudo", "corrected")


@dataclass
class Record:
    """What the run knows about one problem."""

    label: str | None = None  # the target rewards are checked against (None: no label yet)
    source: str = "none"  # gold (annotated) | pseudo (majority vote) | corrected (gold replaced) | none
    confidence: float = 0.0  # trust in ``label``: 1 for gold, the vote's consensus for pseudo / corrected
    visits: int = 0  # groups trained on this problem
    successes: float = 0.0  # Σ training reward over every rollout of it
    rollouts: int = 0  # rollouts of it
    history: list[float] = field(default_factory=list)  # mean reward of each of the last visits
    streak: int = 0  # consecutive visits whose confident majority contradicted the label
    candidate: str | None = None  # the majority answer of that streak


class SupervisionState:
    """Records by problem uid, with the label-correction rule and budget counts.

    ``history_len`` bounds each record's visit history (oldest dropped first).
    """

    def __init__(self, history_len: int = 8) -> None:
        if history_len < 1:
            raise ValueError(f"supervision state: history_len must be >= 1, got {history_len}")
        self.history_len = history_len
        self.records: dict[str, Record] = {}

    def __contains__(self, uid: str) -> bool:
        return uid in self.records

    def get(self, uid: str) -> Record:
        """The record of ``uid`` (an empty one is created on first use)."""
        if uid not in self.records:
            self.records[uid] = Record()
        return self.records[uid]

    def set_label(self, uid: str, label: str | None, source: str, confidence: float) -> None:
        if source not in SOURCES:
            raise ValueError(f"supervision state: source must be one of {SOURCES}, got '{source}'")
        rec = self.get(uid)
        rec.label, rec.source, rec.confidence = label, source, float(confidence)

    def visit(self, uid: str, rewards: list[float]) -> None:
        """One group of ``rewards`` (its rollouts' training rewards) on ``uid``."""
        rec = self.get(uid)
        rec.visits += 1
        rec.successes += float(sum(rewards))
        rec.rollouts += len(rewards)
        rec.history = (rec.history + [sum(rewards) / max(len(rewards), 1)])[-self.history_len:]

    def note_vote(self, uid: str, majority: str | None, consensus: float, contradicts: bool,
                  tau_fix: float, m_consecutive: int) -> bool:
        """Label correction: after ``m_consecutive`` visits in a row whose majority answer contradicts
        the label with consensus ≥ ``tau_fix`` (the same answer each time), that answer replaces the
        label (source ``corrected``, confidence = the last consensus). Returns True when it did."""
        rec = self.get(uid)
        if rec.source not in ("gold", "corrected") or majority is None:
            return False
        if not contradicts or consensus < tau_fix:
            rec.streak, rec.candidate = 0, None
            return False
        rec.streak = rec.streak + 1 if majority == rec.candidate else 1
        rec.candidate = majority
        if rec.streak < m_consecutive:
            return False
        self.set_label(uid, majority, "corrected", consensus)
        rec.streak, rec.candidate = 0, None
        return True

    def success_rate(self, uid: str) -> tuple[float, float]:
        """Posterior mean and variance of the success rate under Beta(1 + successes, 1 + failures)."""
        rec = self.records.get(uid)
        a = 1.0 + (rec.successes if rec else 0.0)
        b = 1.0 + ((rec.rollouts - rec.successes) if rec else 0.0)
        return a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1.0))

    def count(self, source: str) -> int:
        return sum(r.source == source for r in self.records.values())

    def state_dict(self) -> dict[str, Any]:
        return {"history_len": self.history_len,
                "records": {uid: dataclasses.asdict(r) for uid, r in self.records.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history_len = int(state["history_len"])
        self.records = {}
        for uid, r in state["records"].items():
            self.records[str(uid)] = Record(
                label=r["label"], source=str(r["source"]), confidence=float(r["confidence"]),
                visits=int(r["visits"]), successes=float(r["successes"]), rollouts=int(r["rollouts"]),
                history=[float(x) for x in r["history"]], streak=int(r["streak"]), candidate=r["candidate"])
