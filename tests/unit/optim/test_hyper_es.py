"""Hyper-ES (docs/methods.md §2.10): CMA-ES on a synthetic fitness, merge applied to a model, config errors."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rlvr.loops.hyper_es import CMASearch, HyperES, maximise
from rlvr.optim.merging import LayerwiseMerge
from rlvr.registry import RegistryError, build
from rlvr.train.budget import budget_reason

C_STAR = np.array([0.7, -0.3, 1.2, 0.1])


def quadratic(c: np.ndarray) -> float:
    """F(c) = −‖c − c*‖², maximum 0 at c* (a stand-in for the reward as a function of merge coefficients)."""
    return -float(np.sum((np.asarray(c) - C_STAR) ** 2))


def test_cma_es_improves_and_converges_on_a_quadratic():
    pytest.importorskip("cma")  # Hyper-ES's one optional dependency
    x0 = np.full(4, 0.25)  # c_init = 1/K with K = 4
    start = quadratic(x0)  # −(0.45² + 0.55² + 0.95² + 0.15²) = −(0.2025 + 0.3025 + 0.9025 + 0.0225) = −1.43
    assert start == pytest.approx(-1.43)
    search = maximise(quadratic, x0, sigma0=0.3, generations=60, seed=0)
    assert quadratic(search.mean) > start
    np.testing.assert_allclose(search.mean, C_STAR, atol=0.02)


def test_cma_search_is_reproducible_in_its_seed():
    pytest.importorskip("cma")
    a, b, c = (CMASearch(np.zeros(3), 0.3, popsize=5, seed=s) for s in (1, 1, 2))
    xa, xb, xc = a.ask(), b.ask(), c.ask()
    assert all(np.array_equal(u, v) for u, v in zip(xa, xb)) and len(xa) == 5
    assert not all(np.array_equal(u, v) for u, v in zip(xa, xc))
    # pycma reseeds numpy's global RNG; the wrapper keeps its own state and leaves the global one alone
    np.random.seed(5)
    expected = np.random.rand()
    np.random.seed(5)
    CMASearch(np.zeros(3), 0.3, seed=9).ask()
    assert np.random.rand() == expected


def test_cma_tell_maximises():
    pytest.importorskip("cma")
    search = CMASearch(np.zeros(2), 0.5, popsize=6, seed=0)
    xs = search.ask()
    target = xs[0]  # reward the first candidate only: the mean must move towards it
    search.tell(xs, [1.0 if i == 0 else 0.0 for i in range(len(xs))])
    assert np.linalg.norm(search.mean - target) < np.linalg.norm(np.zeros(2) - target)


def test_merge_on_a_tiny_model_restores_base_and_tuned_exactly():
    from rlvr.models import build_char_tokenizer, build_tiny_model
    model = build_tiny_model(build_char_tokenizer(), hidden=16, layers=2, heads=2)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    tuned = copy.deepcopy(model)
    with torch.no_grad():
        for n, p in tuned.named_parameters():
            if "q_proj" in n:
                p.add_(0.01 * torch.randn_like(p))
    names = [n for n in base if "q_proj" in n]
    delta = {n: dict(tuned.named_parameters())[n].detach().double() - base[n].double() for n in names}
    merge = LayerwiseMerge({n: base[n] for n in names}, [delta], drop_p=0.0, keep_rho=1.0)
    assert merge.shape == (2, 1)  # two decoder layers, one direction
    merge.apply(model, np.ones(2))
    assert all(torch.equal(p, dict(tuned.named_parameters())[n]) for n, p in model.named_parameters())
    merge.apply(model, np.zeros(2))
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters())


def test_plugin_registered_with_methods_defaults_and_errors():
    plugin = build("loop", "hyper_es")
    assert isinstance(plugin, HyperES)
    cfg = plugin.config
    assert (cfg.dare_drop_p, cfg.ties_keep_rho, cfg.cma_sigma0) == (0.9, 0.2, 0.3)  # docs/methods.md §2.10
    with pytest.raises(ValueError, match="coef_granularity"):
        build("loop", "hyper_es", coef_granularity="row")
    with pytest.raises(RegistryError, match="unknown parameter"):
        build("loop", "hyper_es", sigma=1.0)


def test_budget_reason():
    class Run:
        steps, max_rollouts, max_seconds = 3, 100, 0.0
    assert budget_reason(Run, 2, 99, 5.0) is None
    assert budget_reason(Run, 3, 0, 0.0) == "steps"
    assert budget_reason(Run, 1, 100, 0.0) == "rollouts"
    assert budget_reason(Run, 1, 90, 0.0, next_cost=10) is None  # the next step ends exactly on the cap
    assert budget_reason(Run, 1, 90, 0.0, next_cost=11) == "rollouts"  # it would pass it: a hard cap
