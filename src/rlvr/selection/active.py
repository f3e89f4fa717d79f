"""Active data selection under label and data budgets, holding the run's supervision state (DE-Venus)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from rlvr.registry import param, register
from rlvr.selection.base import Selector
from rlvr.supervision import SupervisionState, annotate, budget_count, choose_training, problem_pool, score
from rlvr.supervision.transitions import SCORES, weighted_draw
from rlvr.types import Problem

POOLS = ("fixed", "stream")


@dataclass(frozen=True)
class ActiveConfig:
    label_budget: float | None = param(None, "largest fraction of the pool D whose gold label may be used "
                                             "(required; docs/methods.md §2.2 'budget')")
    data_budget: float | None = param(None, "fraction of D trained on, |D′| = ⌊data_budget·|D|⌋ (required; "
                                            "1 in stream mode)")
    tau_fix: float | None = param(None, "label correction: consensus a contradicting majority needs (required; "
                                        "above 1 = never correct)")
    m_consecutive: int | None = param(None, "label correction: consecutive contradicting visits needed (required)")
    pool: str = param("fixed", "fixed: a pool D drawn once | stream: fresh task problems each step (as uniform; "
                               "labels spent in arrival order)")
    pool_size: int = param(256, "|D| for pool=fixed; 0 = every training row of a finite (dataset) task")
    pool_seed: int = param(0, "task stream the fixed pool is drawn from")
    label_score: str = param("low_confidence", "which problems of D′ to annotate first: low_confidence | "
                                               "uncertainty | difficulty | random")
    train_score: str = param("difficulty", "which problems of D′ a step prefers: difficulty | uncertainty | "
                                           "low_confidence | random")
    floor: float = param(0.1, "weight added to every score so each problem of D′ stays selectable")
    label_rounds: int = param(1, "spend the label budget in this many equal instalments, one per transition "
                                 "(1 = all at step 0, an offline transition)")
    refresh_every: int = param(10, "steps between transitions (annotation instalments)")
    history_len: int = param(8, "visits kept in each problem's success history")

    def __post_init__(self) -> None:
        for name in ("label_budget", "data_budget", "tau_fix", "m_consecutive"):
            if getattr(self, name) is None:
                raise ValueError(f"active: {name} is required (docs/methods.md §2.2 lists no default)")
        if not (0.0 <= self.label_budget <= 1.0 and 0.0 < self.data_budget <= 1.0):
            raise ValueError(f"active: budgets must be fractions, label in [0, 1] and data in (0, 1]; "
                             f"got {self.label_budget}, {self.data_budget}")
        if self.pool not in POOLS or self.label_score not in SCORES or self.train_score not in SCORES:
            raise ValueError(f"active: pool in {POOLS}, scores in {SCORES}; got {self.pool}, "
                             f"{self.label_score}, {self.train_score}")
        if self.pool == "stream" and self.data_budget != 1.0:
            raise ValueError("active: pool=stream trains on every problem it draws; set data_budget=1")
        if self.m_consecutive < 1 or self.label_rounds < 1 or self.refresh_every < 1 or self.floor < 0:
            raise ValueError("active: m_consecutive, label_rounds, refresh_every must be >= 1 and floor >= 0")


@register("selector", "active")
class ActiveSelection(Selector):
    """DE-Venus offline transitions D → D′ plus budgeted, score-weighted sampling from D′.

    Paper: "DE-Venus: a data-efficient RLVR framework" (arXiv id unknown; seed abstract), docs/methods.md
    §2.2 ("Active Data Selection"; label correction from "Training-Time Supervision Refinement").
    RECONSTRUCTION: the scores, the instalment schedule and the correction rule are the team's
    reading (see rlvr.supervision.transitions).

    Equation. At step 0: D′ = the ⌊data_budget·|D|⌋ best problems of D by ``train_score`` (a fixed
    subset; at most that many problems are ever trained on). At transition r (every
    ``refresh_every`` steps, r < label_rounds): annotate the best problems of D′ by ``label_score``
    until ``⌈(r + 1)/label_rounds · B_L⌉`` carry gold labels, ``B_L = ⌊label_budget·|D|⌋``. Each
    step: n problems of D′ drawn ∝ ``floor + score`` without replacement. A problem is handed out
    with ``answer`` = its label in use (gold or corrected) or None (unlabelled → pseudo-labels by
    the ``de_venus`` shaper). ``observe`` adds each group to the supervision state and replaces a
    label after ``m_consecutive`` visits whose majority contradicts it with consensus ≥ τ_fix.

    Differs from uniform: keeps a ``SupervisionState`` (saved in checkpoints); with pool=stream,
    label_budget=1, data_budget=1 and τ_fix > 1 it hands out exactly uniform's problems and labels.

    Data parallel: ``observe`` gets every rank's groups and notes (``feedback_meta``), so the
    supervision state, the label budget and the selections are global and identical on every rank.

    Shapes: → list of n problems. Metrics (``select/``): label_budget, labelled, corrected,
    pseudo, data_budget, trained_distinct, pool_size.
    """

    Config = ActiveConfig
    feedback_meta = ("supervision_groups",)
    paper = "DE-Venus: a data-efficient RLVR framework (arXiv id unknown; seed abstract)"

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.state = SupervisionState(self.config.history_len)
        self.train_uids: list[str] = []  # D′ (fixed pool), in pool order
        self.seen_uids: list[str] = []  # every uid handed out, in first-seen order (the stream's D)
        self.transitions = 0
        self._pool: list[Problem] | None = None

    # --- selection --------------------------------------------------------------------------

    def select(self, task: Any, n: int, step: int, seed: int) -> list[Problem]:
        if self.config.pool == "stream":
            return [self._hand_out(p) for p in self._stream(task, n, seed)]
        by_uid = {p.uid: p for p in self._pool_of(task)}
        self._transitions_due(step, by_uid)
        candidates = [by_uid[u] for u in self.train_uids]
        weights = [self.config.floor + score(self.state, p.uid, self.config.train_score) for p in candidates]
        picks = weighted_draw(weights, n, random.Random(f"active:{seed}"))
        return [self._hand_out(candidates[i]) for i in sorted(picks)]

    def _stream(self, task: Any, n: int, seed: int) -> list[Problem]:
        problems = task.problems(n, seed=seed)
        for p in problems:
            if p.uid in self.state:
                continue
            self.seen_uids.append(p.uid)
            self.state.get(p.uid)
            allowed = budget_count(self.config.label_budget, len(self.seen_uids))
            if p.answer is not None and self.state.count("gold") + self.state.count("corrected") < allowed:
                self.state.set_label(p.uid, str(p.answer), "gold", 1.0)
        return problems

    def _pool_of(self, task: Any) -> list[Problem]:
        if self._pool is None:
            self._pool = problem_pool(task, self.config.pool_size, self.config.pool_seed)
        return self._pool

    def _transitions_due(self, step: int, by_uid: dict[str, Problem]) -> None:
        """Run the offline transitions whose time has come (idempotent within a step's refills)."""
        cfg = self.config
        pool = list(by_uid.values())
        while self.transitions <= step // cfg.refresh_every and self.transitions < max(cfg.label_rounds, 1):
            rng = random.Random(f"active:transition:{cfg.pool_seed}:{self.transitions}")
            if not self.train_uids:
                self.train_uids = [pool[i].uid for i in choose_training(self.state, pool, cfg.data_budget,
                                                                        cfg.train_score, rng)]
            target = -(-budget_count(cfg.label_budget, len(pool)) * (self.transitions + 1) // cfg.label_rounds)
            have = self.state.count("gold") + self.state.count("corrected")
            annotate(self.state, [by_uid[u] for u in self.train_uids], target - have, cfg.label_score, rng)
            self.transitions += 1

    def _hand_out(self, p: Problem) -> Problem:
        rec = self.state.get(p.uid)
        label = rec.label if rec.source in ("gold", "corrected") else None
        sup = {"source": rec.source if label is not None else "pseudo", "confidence": rec.confidence}
        return Problem(p.prompt, label, p.solution, p.uid, {**p.meta, "supervision": sup})

    # --- learning ---------------------------------------------------------------------------

    def observe(self, feedback: dict[str, Any]) -> None:
        cfg = self.config
        notes = (feedback.get("meta") or {}).get("supervision_groups")
        if notes is None:  # no de_venus shaper: success history from the trained rows only
            notes = _notes_from_rewards(feedback["problems"], feedback["rewards"])
        for note in notes:
            uid = note["uid"]
            self.state.visit(uid, note["rewards"])
            rec = self.state.get(uid)
            if note.get("labelled", True):
                self.state.note_vote(uid, note.get("majority"), note.get("consensus", 0.0),
                                     note.get("contradicts", False), cfg.tau_fix, cfg.m_consecutive)
            elif note.get("majority") is not None:
                self.state.set_label(uid, note["majority"], "pseudo", note["consensus"])
            elif rec.source == "none":
                rec.confidence = 0.0
        if feedback.get("metrics") is not None:
            feedback["metrics"].update(self.metrics())

    def metrics(self) -> dict[str, float]:
        """Budgets and their use (``select/``): counts of problems."""
        cfg = self.config
        size = len(self._pool) if self._pool is not None else len(self.seen_uids)
        trained = sum(r.visits > 0 for r in self.state.records.values())
        return {"select/pool_size": float(size),
                "select/label_budget": float(budget_count(cfg.label_budget, size)),
                "select/labelled": float(self.state.count("gold") + self.state.count("corrected")),
                "select/corrected": float(self.state.count("corrected")),
                "select/pseudo": float(self.state.count("pseudo")),
                "select/data_budget": float(budget_count(cfg.data_budget, size) if cfg.pool == "fixed" else size),
                "select/trained_distinct": float(trained)}

    def state_dict(self) -> dict[str, Any]:
        return {"supervision": self.state.state_dict(), "train_uids": list(self.train_uids),
                "seen_uids": list(self.seen_uids), "transitions": self.transitions}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state.load_state_dict(state["supervision"])
        self.train_uids = [str(u) for u in state["train_uids"]]
        self.seen_uids = [str(u) for u in state["seen_uids"]]
        self.transitions = int(state["transitions"])


def _notes_from_rewards(problems: list[Problem], rewards: Any) -> list[dict[str, Any]]:
    """One note per problem (its rows' objective-0 rewards) when no shaper wrote group notes."""
    by_uid: dict[str, list[float]] = {}
    for p, r in zip(problems, rewards[:, 0].tolist()):
        by_uid.setdefault(p.uid, []).append(float(r))
    return [{"uid": u, "rewards": rs} for u, rs in by_uid.items()]
