"""Verifier-projected JS diversity and the functional-sparsity probe (docs/methods.md §2.5)."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.analysis.diversity import answer_distributions, bernoulli, entropy, js_diversity
from rlvr.analysis.sparsity import kept_fraction, sparsify_update, sparsity_probe


# --- JS diversity -------------------------------------------------------------------------------

def test_js_golden_values():
    """Two members, one prompt, binary outcomes.
    (a) q1 = (1, 0), q2 = (0, 1): mixture (½, ½), H = ln 2; members' H = 0 → JS = ln 2 = 0.6931472.
    (b) p = (0.5, 1): q1 = (½, ½), q2 = (1, 0); mixture (¾, ¼), H = −(¾ ln ¾ + ¼ ln ¼) = 0.5623351;
        mean member H = ½ ln 2 = 0.3465736 → JS = 0.2157616."""
    a = bernoulli(torch.tensor([[1.0], [0.0]]))  # (N=2, X=1, 2)
    b = bernoulli(torch.tensor([[0.5], [1.0]]))
    assert js_diversity(a).item() == pytest.approx(0.6931472, abs=1e-7)
    assert js_diversity(b).item() == pytest.approx(0.2157616, abs=1e-7)
    both = bernoulli(torch.tensor([[1.0, 0.5], [0.0, 1.0]]))  # the two prompts side by side: (X,) = per prompt
    assert torch.allclose(js_diversity(both), torch.tensor([0.6931472, 0.2157616], dtype=torch.float64), atol=1e-7)


def test_js_distinct_answers_golden():
    """Three greedy members answer "5", "5", "7": point masses; mixture (⅔, ⅓) →
    JS = −(⅔ ln ⅔ + ⅓ ln ⅓) = 0.6365142."""
    q = answer_distributions([[["5"]], [["5"]], [["7"]]])  # (3, 1, 2)
    assert q.shape == (3, 1, 2)
    assert js_diversity(q).item() == pytest.approx(0.6365142, abs=1e-7)


def test_answer_distributions_counts_samples_and_none():
    q = answer_distributions([[["1", "1", None, "2"], ["3"]]])  # one member, two prompts
    # prompt 0 outcomes sorted by repr: "'1'", "'2'", "None"; prompt 1 has one outcome (padded with 0)
    assert torch.equal(q[0, 0], torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64))
    assert torch.equal(q[0, 1], torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))


def test_js_zero_when_members_agree_and_bounded_by_log_outcomes():
    same = torch.tensor([0.2, 0.5, 0.3]).expand(4, 2, 3)  # 4 members, 2 prompts, identical q
    assert torch.allclose(js_diversity(same), torch.zeros(2, dtype=torch.float64), atol=1e-12)
    q = torch.softmax(3 * torch.randn(6, 5, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
    js = js_diversity(q)
    assert (js >= -1e-12).all() and (js <= math.log(3) + 1e-12).all() and (js > 0).all()


def test_entropy_treats_zero_log_zero_as_zero():
    assert entropy(torch.tensor([1.0, 0.0])).item() == 0.0
    assert entropy(torch.tensor([0.5, 0.5])).item() == pytest.approx(math.log(2))


def test_js_rejects_non_distributions():
    with pytest.raises(ValueError, match="probability"):
        js_diversity(torch.tensor([[[0.5, 0.6]]]))
    with pytest.raises(ValueError, match="shape"):
        js_diversity(torch.tensor([0.5, 0.5]))


# --- functional sparsity ------------------------------------------------------------------------

def _pair() -> tuple[dict, dict]:
    theta0 = {"a": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.0, -1.0])}
    theta = {"a": torch.tensor([1.1, 1.5]), "b": torch.tensor([0.01, -1.02])}  # |Δ| = (0.1, 0.5), (0.01, 0.02)
    return theta0, theta


def test_sparsify_q_one_is_theta_and_q_zero_is_theta0_exactly():
    theta0, theta = _pair()
    full, none = sparsify_update(theta0, theta, 1.0), sparsify_update(theta0, theta, 0.0)
    assert all(torch.equal(full[k], theta[k]) and torch.equal(none[k], theta0[k]) for k in theta)


def test_sparsify_golden_global_and_per_tensor():
    """n = 4 entries, q = 0.5 keeps ⌈2⌉ = 2.
    global: the two largest |Δ| overall are 0.5 and 0.1 (both in a) → a = θ_a, b = θ0_b.
    tensor: the largest of each tensor: a keeps 0.5 (index 1), b keeps 0.02 (index 1)."""
    theta0, theta = _pair()
    g = sparsify_update(theta0, theta, 0.5)
    assert torch.equal(g["a"], torch.tensor([1.1, 1.5])) and torch.equal(g["b"], torch.tensor([0.0, -1.0]))
    t = sparsify_update(theta0, theta, 0.5, scope="tensor")
    assert torch.equal(t["a"], torch.tensor([1.0, 1.5])) and torch.equal(t["b"], torch.tensor([0.0, -1.02]))
    assert kept_fraction(theta0, g, theta) == 0.5
    with pytest.raises(ValueError):
        sparsify_update(theta0, theta, 1.5)


def test_sparsity_probe_reports_reward_retained_and_restores_theta():
    """R(w) = w₁ + w₂ on a 2-weight linear layer; θ0 = (0, 0), θ = (1, 3): R gains 4.
    q = 0.5 keeps the 3 → R = 3, retained 0.75; q = 1 → retained 1; q = 0 → 0."""
    layer = torch.nn.Linear(2, 1, bias=False)
    theta0 = {"weight": torch.zeros(1, 2)}
    theta = {"weight": torch.tensor([[1.0, 3.0]])}
    with torch.no_grad():
        layer.weight.copy_(theta["weight"])
    rows = sparsity_probe(layer, theta0, theta, [0.0, 0.5, 1.0], lambda m: float(m.weight.sum()))
    assert [r["retained"] for r in rows] == [0.0, 0.75, 1.0]
    assert rows[1]["reward"] == 3.0 and rows[1]["reward_full"] == 4.0 and rows[1]["reward_base"] == 0.0
    assert torch.equal(layer.weight.detach(), theta["weight"])
