"""Active data selection (DE-Venus offline transitions, docs/methods.md §2.2): budgets, identity, scores, state."""

from __future__ import annotations

import json
import random

import pytest
import torch

from rlvr.registry import build
from rlvr.tasks import Arithmetic
from rlvr.types import Problem


class ListTask:
    name = "list"

    def __init__(self, problems: list[Problem]) -> None:
        self._rows = problems

    def rows(self, split: str) -> list[Problem]:
        return list(self._rows)

    def problems(self, n: int, seed: int, split: str = "train") -> list[Problem]:
        rng = random.Random(seed)
        return [Problem(p.prompt, p.answer, p.solution, p.uid, dict(p.meta)) for p in rng.sample(self._rows, n)]


def _pool(n: int, answered_every: int = 1) -> ListTask:
    return ListTask([Problem(f"q{i}", str(i) if i % answered_every == 0 else None, uid=f"q{i}") for i in range(n)])


def _active(**kw):
    base = {"label_budget": 0.2, "data_budget": 0.5, "tau_fix": 0.8, "m_consecutive": 2, "pool_size": 0}
    return build("selector", "active", **{**base, **kw})


def _observe(sel, problems, rng, metrics=None, contradict=()):
    """Feedback as the de_venus shaper would write it: one note per problem, 4 random rewards."""
    notes = []
    for p in problems:
        rs = [float(rng.random() < 0.5) for _ in range(4)]
        notes.append({"uid": p.uid, "rewards": rs, "labelled": p.answer is not None,
                      "majority": "X" if p.uid in contradict else (p.answer or "7"),
                      "consensus": 1.0 if p.uid in contradict else 0.25 + 0.5 * rng.random(),
                      "contradicts": p.uid in contradict})
    sel.observe({"problems": problems, "rewards": torch.zeros(len(problems), 1), "meta": {"supervision_groups": notes},
                 "metrics": metrics if metrics is not None else {}})


def test_stream_identity_hands_out_uniforms_problems():
    task = Arithmetic()
    active = _active(pool="stream", label_budget=1.0, data_budget=1.0, tau_fix=1.1, m_consecutive=1, pool_size=8)
    uniform = build("selector", "uniform")
    for step, seed in enumerate([11, 12, 13]):
        got, want = active.select(task, 4, step, seed), uniform.select(task, 4, step, seed)
        assert [(p.prompt, p.answer, p.uid) for p in got] == [(p.prompt, p.answer, p.uid) for p in want]
        assert all(p.meta["supervision"]["source"] == "gold" for p in got)


@pytest.mark.parametrize("label_budget,data_budget,rounds", [(0.1, 0.5, 1), (0.3, 0.2, 3), (0.0, 1.0, 2),
                                                              (1.0, 0.3, 4)])
def test_budgets_are_never_exceeded(label_budget, data_budget, rounds):
    # |D| = 40, a third of them without answers. At every step: labelled ≤ ⌊label_budget·40⌋,
    # every drawn problem lies in D′ and |D′| = ⌊data_budget·40⌋; corrections never add labels.
    task = _pool(40, answered_every=1)
    for i, p in enumerate(task._rows):
        if i % 3 == 1:
            p.answer = None
    sel = _active(label_budget=label_budget, data_budget=data_budget, label_rounds=rounds, refresh_every=2)
    rng, trained = random.Random(0), set()
    max_labels, max_data = int(label_budget * 40 + 1e-9), int(data_budget * 40 + 1e-9)
    for step in range(16):
        problems = sel.select(task, 6, step, seed=100 + step)
        trained |= {p.uid for p in problems}
        contradict = {p.uid for p in problems if p.answer is not None and rng.random() < 0.5}
        metrics: dict = {}
        _observe(sel, problems, rng, metrics, contradict)
        labelled = sel.state.count("gold") + sel.state.count("corrected")
        assert labelled <= max_labels and metrics["select/labelled"] == labelled
        assert metrics["select/label_budget"] == max_labels and metrics["select/data_budget"] == max_data
        assert len(sel.train_uids) == max(max_data, 1) and trained <= set(sel.train_uids)
        assert metrics["select/trained_distinct"] <= max(max_data, 1)
        assert all(p.answer is None or sel.state.get(p.uid).source in ("gold", "corrected") for p in problems)
    if label_budget > 0:  # the budget is used (up to the problems of D′ that have an answer)
        assert sel.state.count("gold") + sel.state.count("corrected") > 0


def test_stream_label_budget_in_arrival_order():
    # label_budget 0.25 in stream mode: after each select, labelled ≤ ⌊0.25·seen⌋.
    sel = _active(pool="stream", label_budget=0.25, data_budget=1.0)
    task = Arithmetic()
    for step in range(6):
        problems = sel.select(task, 4, step, seed=step)
        labelled = sel.state.count("gold")
        assert labelled == int(0.25 * len(sel.seen_uids))
        assert sum(p.answer is not None for p in problems) <= len(problems)


def test_unlabelled_problems_are_handed_out_without_answer():
    sel = _active(label_budget=0.1, data_budget=1.0)  # ⌊0.1·10⌋ = 1 gold label
    problems = sel.select(_pool(10), 10, 0, seed=1)
    gold = [p for p in problems if p.answer is not None]
    assert len(gold) == 1 and gold[0].meta["supervision"] == {"source": "gold", "confidence": 1.0}
    assert all(p.meta["supervision"]["source"] == "pseudo" for p in problems if p.answer is None)


def test_label_correction_through_observe():
    # m = 2 visits whose confident majority "X" contradicts the gold label → the label becomes "X".
    sel = _active(label_budget=1.0, data_budget=1.0, tau_fix=0.8, m_consecutive=2)
    task = _pool(3)
    rng = random.Random(0)
    for step in range(2):
        problems = sel.select(task, 3, step, seed=step)
        _observe(sel, problems, rng, contradict={"q1"})
    again = {p.uid: p for p in sel.select(task, 3, 2, seed=2)}
    assert again["q1"].answer == "X" and again["q1"].meta["supervision"]["source"] == "corrected"
    assert again["q0"].answer == "0" and sel.state.count("corrected") == 1


def test_difficulty_score_prefers_intermediate_problems():
    # q0 solved 20/20, q1 half right 10/20, q2 never right 0/20. Weights 0.1 + 4·p̂(1−p̂) with
    # p̂ = 21/22, 11/22, 1/22: 0.2736, 1.1, 0.2736. Over 300 single draws q1 is drawn most.
    sel = _active(label_budget=1.0, data_budget=1.0)
    task = _pool(3)
    sel.select(task, 1, 0, seed=0)
    for uid, k in (("q0", 20), ("q1", 10), ("q2", 0)):
        sel.state.visit(uid, [1.0] * k + [0.0] * (20 - k))
    counts = {"q0": 0, "q1": 0, "q2": 0}
    for s in range(300):
        counts[sel.select(task, 1, 1, seed=s)[0].uid] += 1
    assert counts["q1"] > 2 * counts["q0"] and counts["q1"] > 2 * counts["q2"]


def test_second_instalment_labels_least_confident():
    # label_budget 0.4 of 5 = 2 labels in 2 rounds: 1 at step 0 (ties → seeded random), then at step 2
    # the unlabelled problem with the lowest pseudo-label confidence gets the second label.
    sel = _active(label_budget=0.4, data_budget=1.0, label_rounds=2, refresh_every=2)
    task = _pool(5)
    sel.select(task, 5, 0, seed=0)
    first = {u for u, r in sel.state.records.items() if r.source == "gold"}
    assert len(first) == 1
    confidences = {"q0": 0.9, "q1": 0.8, "q2": 0.3, "q3": 0.7, "q4": 0.6}
    for uid, c in confidences.items():
        if uid not in first:
            sel.state.set_label(uid, "7", "pseudo", c)
    sel.select(task, 5, 2, seed=2)
    second = {u for u, r in sel.state.records.items() if r.source == "gold"} - first
    expected = min((u for u in confidences if u not in first), key=confidences.get)
    assert second == {expected}


def test_state_round_trip_continues_identically():
    task = _pool(20, answered_every=2)
    a = _active(label_budget=0.3, data_budget=0.6, label_rounds=2, refresh_every=2)
    rng = random.Random(3)
    for step in range(3):
        _observe(a, a.select(task, 4, step, seed=step), rng)
    b = _active(label_budget=0.3, data_budget=0.6, label_rounds=2, refresh_every=2)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.state_dict() == a.state_dict()
    for step in range(3, 6):
        pa, pb = a.select(task, 4, step, seed=step), b.select(task, 4, step, seed=step)
        assert [(p.uid, p.answer) for p in pa] == [(p.uid, p.answer) for p in pb]
        r1, r2 = random.Random(step), random.Random(step)
        _observe(a, pa, r1)
        _observe(b, pb, r2)
    assert b.state_dict() == a.state_dict()


def test_required_and_invalid_config():
    with pytest.raises(ValueError, match="label_budget is required"):
        build("selector", "active", data_budget=1.0, tau_fix=1.0, m_consecutive=1)
    with pytest.raises(ValueError, match="data_budget=1"):
        _active(pool="stream", data_budget=0.5)
