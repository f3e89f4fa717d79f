"""pass@k (unbiased estimator), maj@k and the evaluation loop."""

import math
from fractions import Fraction

import pytest
import torch

import rlvr.eval.evaluation as evaluate_module
from rlvr.eval import evaluate, maj_at_k, pass_at_k
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.registry import build
from rlvr.rollout import Generation
from rlvr.types import Problem


def test_pass_at_k_golden():
    assert pass_at_k(2, 1, 1) == pytest.approx(0.5)  # one of two samples right
    # n=5, c=2, k=2: 1 − C(3,2)/C(5,2) = 1 − 3/10 = 0.7
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # n=4, c=1, k=2: 1 − C(3,2)/C(4,2) = 1 − 3/6 = 0.5
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)  # pass@1 is the fraction correct
    assert pass_at_k(7, 0, 3) == 0.0
    assert pass_at_k(4, 2, 3) == 1.0  # only 2 wrong: every 3-subset holds a right one
    assert pass_at_k(5, 5, 5) == 1.0


@pytest.mark.parametrize("n,c,k", [(10, 3, 4), (200, 37, 50), (1000, 1, 999), (64, 20, 1)])
def test_pass_at_k_matches_exact_binomials(n, c, k):
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12, abs=1e-12)


def test_pass_at_k_is_monotone_in_k_and_c():
    vals = [pass_at_k(16, 3, k) for k in range(1, 17)]
    assert all(a < b for a, b in zip(vals, vals[1:14])) and vals[-1] == 1.0
    assert pass_at_k(16, 4, 5) > pass_at_k(16, 3, 5)


def test_pass_at_k_rejects_bad_arguments():
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(3, 1, 4)


def test_maj_at_k():
    answers = ["1", "2", " 2", None, "3"]
    assert maj_at_k(answers, "2", 5) == 1.0  # "2" twice (stripped) beats "1" and "3"
    assert maj_at_k(answers, "2", 2) == 0.0  # tie "1" vs "2": the first seen, "1", wins
    assert maj_at_k([None, None], "2", 2) == 0.0  # no parsed answer, no vote
    assert maj_at_k(["7"], " 7 ", 1) == 1.0
    with pytest.raises(ValueError):
        maj_at_k(["1"], "1", 2)


def fake_generate(batches):
    """Replace generate: each call returns the next list of texts (one token per text)."""
    def gen(model, tokenizer, prompts, *, max_new_tokens, seed=None, **kw):
        texts = batches.pop(0)
        assert len(texts) == len(prompts)
        n = len(texts)
        return Generation(torch.zeros(n, 1, dtype=torch.long), torch.ones(n, 1, dtype=torch.bool),
                          torch.zeros(n, 2, dtype=torch.long), torch.tensor([[True, False]] * n),
                          torch.zeros(n, 2), texts)
    return gen


def test_evaluate_golden_with_scripted_samples(monkeypatch):
    task = build("task", "arithmetic")
    probs = [Problem("0+1=", "1"), Problem("1+2=", "3")]
    greedy = ["#1", "#4"]  # 1 right of 2
    samples = ["#1", "#2", "#1", "#1",  # problem 0: c = 3, majority "1" right
               "#5", "#5", "#3", "#4"]  # problem 1: c = 1, majority "5" wrong
    monkeypatch.setattr(evaluate_module, "generate", fake_generate([greedy, samples]))
    out = evaluate(None, None, task, probs, k=4, batch_size=64)
    assert out["greedy_accuracy"] == 0.5
    assert out["pass@1"] == pytest.approx((3 / 4 + 1 / 4) / 2)  # 0.5
    # pass@2: problem 0 has one wrong sample < 2 → 1; problem 1: 1 − C(3,2)/C(4,2) = 0.5 → mean 0.75
    assert out["pass@2"] == pytest.approx(0.75)
    assert out["pass@4"] == pytest.approx(1.0)
    assert out["maj@4"] == pytest.approx(0.5)
    assert out["num_problems"] == 2 and out["sample_length"] == 1.0
    assert out["greedy_well_formed"] == 1.0 and out["sample_well_formed"] == 1.0  # every reply states "#n"


def test_evaluate_reports_the_share_of_well_formed_replies(monkeypatch):
    task = build("task", "arithmetic")
    probs = [Problem("0+1=", "1"), Problem("1+2=", "3")]
    greedy = ["#1", "no answer here"]  # the second states no '#' answer: parsed is None
    samples = ["#1", "??", "#7", "", "#3", "#3", "x", "#3"]  # 5 of 8 readable (2 of them wrong)
    monkeypatch.setattr(evaluate_module, "generate", fake_generate([greedy, samples]))
    out = evaluate(None, None, task, probs, k=4, batch_size=64)
    assert out["greedy_well_formed"] == 0.5 and out["greedy_accuracy"] == 0.5
    assert out["sample_well_formed"] == pytest.approx(5 / 8)


def test_evaluate_batches_keep_order(monkeypatch):
    task = build("task", "arithmetic")
    probs = [Problem(f"{i}+0=", str(i)) for i in range(3)]
    # batch_size 2 → greedy in 2 calls; problem 1's greedy answer is wrong
    monkeypatch.setattr(evaluate_module, "generate", fake_generate([["#0", "#9"], ["#2"]]))
    out = evaluate(None, None, task, probs, k=0, batch_size=2)
    assert out["greedy_accuracy"] == pytest.approx(2 / 3) and "pass@1" not in out


def test_evaluate_runs_a_tiny_model():
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2)
    task = build("task", "arithmetic")
    out = evaluate(model, tok, task, task.problems(4, 0, split="test"), k=2, max_new_tokens=8, seed=0)
    assert set(out) >= {"greedy_accuracy", "pass@1", "pass@2", "maj@2", "greedy_length"}
    assert 0.0 <= out["pass@1"] <= out["pass@2"] <= 1.0
    assert 1.0 <= out["greedy_length"] <= 8.0
    with pytest.raises(ValueError, match="no problems"):
        evaluate(model, tok, task, [], k=1)
