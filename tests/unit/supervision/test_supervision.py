"""Supervision state (DE-Venus, docs/methods.md §2.2): records, label correction, budgets, round trip."""

from __future__ import annotations

import json
import random

import pytest

from rlvr.supervision import (SupervisionState, annotate, budget_count, choose_training, problem_pool, score,
                              weighted_draw)
from rlvr.types import Problem


def test_visit_accumulates_history_and_beta_posterior():
    # Two visits: rewards [1, 0, 1, 1] then [0, 0]: successes 3 of 6 rollouts, history [0.75, 0.0].
    # Beta(1 + 3, 1 + 3): mean 4/8 = 0.5, variance 4·4/(8²·9) = 16/576 = 0.027778.
    st = SupervisionState(history_len=8)
    st.visit("a", [1.0, 0.0, 1.0, 1.0])
    st.visit("a", [0.0, 0.0])
    rec = st.get("a")
    assert (rec.visits, rec.successes, rec.rollouts, rec.history) == (2, 3.0, 6, [0.75, 0.0])
    assert st.success_rate("a") == pytest.approx((0.5, 16 / 576))
    # Unseen: Beta(1, 1) → mean 1/2, variance 1/12.
    assert st.success_rate("new") == pytest.approx((0.5, 1 / 12))


def test_history_is_bounded():
    st = SupervisionState(history_len=2)
    for r in (1.0, 0.0, 0.5):
        st.visit("a", [r])
    assert st.get("a").history == [0.0, 0.5]


def test_correction_needs_m_consecutive_confident_contradictions():
    # τ_fix = 0.75, m = 3. Visits: contradict(0.8, "5"), contradict(0.8, "5"), agree → streak resets;
    # then three contradictions with "5" at consensus 1.0, 0.75, 0.9 → corrected on the third.
    st = SupervisionState()
    st.set_label("q", "4", "gold", 1.0)
    assert not st.note_vote("q", "5", 0.8, True, 0.75, 3)
    assert not st.note_vote("q", "5", 0.8, True, 0.75, 3)
    assert st.get("q").streak == 2
    assert not st.note_vote("q", "4", 1.0, False, 0.75, 3)
    assert st.get("q").streak == 0
    assert not st.note_vote("q", "5", 1.0, True, 0.75, 3)
    assert not st.note_vote("q", "5", 0.75, True, 0.75, 3)
    assert st.note_vote("q", "5", 0.9, True, 0.75, 3)
    rec = st.get("q")
    assert (rec.label, rec.source, rec.confidence, rec.streak) == ("5", "corrected", 0.9, 0)


def test_correction_resets_on_low_consensus_or_other_answer_and_skips_unlabelled():
    st = SupervisionState()
    st.set_label("q", "4", "gold", 1.0)
    st.note_vote("q", "5", 0.9, True, 0.8, 2)
    st.note_vote("q", "6", 0.9, True, 0.8, 2)  # a different majority restarts the streak at 1
    assert (st.get("q").streak, st.get("q").candidate) == (1, "6")
    st.note_vote("q", "6", 0.7, True, 0.8, 2)  # below τ_fix: reset
    assert st.get("q").source == "gold" and st.get("q").streak == 0
    st.set_label("p", "7", "pseudo", 0.5)
    assert not st.note_vote("p", "8", 1.0, True, 0.0, 1)  # only gold / corrected labels are corrected
    assert st.get("p").label == "7"


def test_state_round_trips_through_json_exactly():
    st = SupervisionState(history_len=3)
    st.set_label("a", "12", "gold", 1.0)
    st.set_label("b", None, "none", 0.0)
    st.visit("a", [1.0, 0.0, 1.0])
    st.visit("b", [0.1, 0.2])
    st.note_vote("a", "13", 0.6666666666666666, True, 0.5, 4)
    again = SupervisionState()
    again.load_state_dict(json.loads(json.dumps(st.state_dict())))
    assert again.state_dict() == st.state_dict()
    assert again.success_rate("b") == st.success_rate("b")


def test_budget_count_and_annotation_never_exceed_budget():
    # ⌊0.1·30⌋ = 3 even though 0.1·30 = 3.0000000000000004 or 2.9999… under float rounding.
    assert budget_count(0.1, 30) == 3 and budget_count(0.3, 10) == 3 and budget_count(0.0, 7) == 0
    st = SupervisionState()
    problems = [Problem(f"p{i}", None if i % 3 == 0 else str(i), uid=f"p{i}") for i in range(9)]
    got = annotate(st, problems, 4, "random", random.Random(0))
    assert len(got) == 4 and all(st.get(u).source == "gold" for u in got)
    assert all(problems[int(u[1:])].answer is not None for u in got)  # only problems with an answer
    more = annotate(st, problems, 10, "random", random.Random(1))  # only 6 - 4 = 2 are left to label
    assert len(more) == 2 and not set(more) & set(got)


def test_scores_rank_by_difficulty_and_uncertainty():
    st = SupervisionState()
    st.visit("easy", [1.0] * 8)
    st.visit("mid", [1.0] * 4 + [0.0] * 4)
    # difficulty: 4·p̂(1−p̂); easy p̂ = 9/10 → 0.36, mid p̂ = 5/10 → 1.0, unseen 1/2 → 1.0.
    assert score(st, "easy", "difficulty") == pytest.approx(0.36)
    assert score(st, "mid", "difficulty") == pytest.approx(1.0)
    # uncertainty: 12·Var; unseen Beta(1,1) → 1; mid Beta(5,5) → 12·25/(100·11) = 0.272727.
    assert score(st, "new", "uncertainty") == pytest.approx(1.0)
    assert score(st, "mid", "uncertainty") == pytest.approx(12 * 25 / 1100)
    pool = [Problem(u, "1", uid=u) for u in ("easy", "mid", "new")]
    assert choose_training(st, pool, 0.34, "difficulty", random.Random(0)) in ([1], [2])
    assert choose_training(st, pool, 0.7, "difficulty", random.Random(0)) == [1, 2]


def test_weighted_draw_without_replacement_then_repeats():
    rng = random.Random(0)
    picks = weighted_draw([1.0, 1.0, 0.0], 2, rng)
    assert sorted(picks) == [0, 1]  # zero weight is drawn last
    # n = 5 from 2 items: three passes (2 + 2 + 1), so each index appears 2 or 3 times.
    many = weighted_draw([1.0, 2.0], 5, random.Random(1))
    assert len(many) == 5 and many.count(0) in (2, 3) and many.count(1) in (2, 3)


def test_problem_pool_dedups_and_needs_finite_task_for_size_zero():
    class Gen:
        name = "gen"

        def problems(self, n, seed, split="train"):
            return [Problem(f"p{i % 3}", "1", uid=f"p{i % 3}") for i in range(n)]

    assert [p.uid for p in problem_pool(Gen(), 5, 0)] == ["p0", "p1", "p2"]
    with pytest.raises(ValueError, match="pool_size=0"):
        problem_pool(Gen(), 0, 0)
