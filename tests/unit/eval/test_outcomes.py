"""Per-problem outcomes of an evaluation: golden rows on scripted samples, consistent with the aggregate
metrics, stable ids, and the RUN/eval_outcomes.jsonl round trip."""

from __future__ import annotations

import pytest

import rlvr.eval.evaluation as evaluate_module
from rlvr.eval import evaluate, pass_at_k
from rlvr.eval.outcomes import problem_id, read_outcomes, write_outcomes
from rlvr.registry import build
from rlvr.types import Problem
from tests.unit.eval.test_eval import fake_generate


def test_outcome_rows_golden_and_they_add_up_to_the_metrics(monkeypatch):
    task = build("task", "arithmetic")
    probs = [Problem("0+1=", "1"), Problem("1+2=", "3", uid="p-7")]
    greedy = ["#1", "#4"]  # problem 0 right, problem 1 wrong
    samples = ["#1", "#2", "#1", "#1",  # problem 0: c = 3, majority "1" right
               "#5", "#5", "#3", "#4"]  # problem 1: c = 1, majority "5" wrong
    monkeypatch.setattr(evaluate_module, "generate", fake_generate([greedy, samples]))
    rows: list[dict] = []
    out = evaluate(None, None, task, probs, k=4, batch_size=64, outcomes=rows)
    assert [(r["index"], r["greedy"], r["correct"], r["k"], r["maj"]) for r in rows] == \
        [(0, 1.0, 3, 4, 1.0), (1, 0.0, 1, 4, 0.0)]
    assert rows[1]["id"] == "p-7" and rows[0]["id"] == problem_id(probs[0]) and len(rows[0]["id"]) == 10
    assert sum(r["greedy"] for r in rows) / 2 == out["greedy_accuracy"]
    assert sum(r["maj"] for r in rows) / 2 == out["maj@4"]
    for j in (1, 2, 4):
        assert sum(pass_at_k(4, r["correct"], j) for r in rows) / 2 == pytest.approx(out[f"pass@{j}"])


def test_greedy_only_rows_without_sampling(monkeypatch):
    task = build("task", "arithmetic")
    monkeypatch.setattr(evaluate_module, "generate", fake_generate([["#0", "#9"]]))
    rows: list[dict] = []
    evaluate(None, None, task, [Problem("0+0=", "0"), Problem("1+0=", "1")], k=0, outcomes=rows)
    assert [r["greedy"] for r in rows] == [1.0, 0.0] and "correct" not in rows[0]


def test_problem_id_is_a_digest_of_prompt_and_answer():
    assert problem_id(Problem("2+2=", "4")) == problem_id(Problem("2+2=", "4"))
    assert problem_id(Problem("2+2=", "4")) != problem_id(Problem("2+2=", "5"))


def test_outcomes_file_round_trip(tmp_path):
    before = [{"index": 0, "id": "a", "subset": None, "greedy": 0.0}]
    after = [{"index": 0, "id": "a", "subset": None, "greedy": 1.0}]
    write_outcomes(tmp_path, before, after)
    assert read_outcomes(tmp_path) == after and read_outcomes(tmp_path, "before") == before
    assert read_outcomes(tmp_path / "nowhere") is None
