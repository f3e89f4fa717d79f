"""ES at scale (docs/methods.md §1.9): the quadratic toy, seeded noise, fitness shaping, subsets, config."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.loops import ES, GRPOThenES
from rlvr.optim import (
    ESConfig, apply_update, es_delta, es_step, member_seeds, param_noise, perturb, restore,
    seed_coefficients, seeded_noise, select_parameters, snapshot, z_score,
)
from rlvr.optim.es import gather_rows
from rlvr.registry import RegistryError, build, names

TARGET = (1.0, -1.0, 0.5)


def _quadratic(theta: torch.Tensor) -> torch.Tensor:
    """F(θ) = −‖θ − (1, −1, 0.5)‖² (docs/methods.md §1.9 toy); ∇F(0) = 2·(1, −1, 0.5)."""
    return -((theta.double() - torch.tensor(TARGET, dtype=torch.float64)) ** 2).sum(-1)


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0))


# --- the quadratic toy --------------------------------------------------------------------------

def test_quadratic_toy_matches_methods_cosine():
    """docs/methods.md §1.9 (verified): numpy default_rng(0) noise, N = 30, σ = 0.001, α = σ/2, θ = 0 → the
    update has cosine ≈ 0.94 with ∇F. Independent numpy re-derivation of the same numbers:
        eps = default_rng(0).standard_normal((30, 3)); f = F(σ·eps)
        z = (f − f.mean())/(f.std() + 1e-8); u = (α/30)·Σ_k z_k eps_k
        → u = (4.3458e-4, −1.9733e-4, 1.9346e-4), cos(u, (2, −2, 1)) = 0.94322."""
    eps = np.random.default_rng(0).standard_normal((30, 3))
    sigma, alpha = 1e-3, 5e-4
    f_np = -((sigma * eps - np.array(TARGET)) ** 2).sum(-1)
    u_np = (alpha / 30) * (((f_np - f_np.mean()) / (f_np.std() + 1e-8))[:, None] * eps).sum(0)

    noise = torch.tensor(eps)
    z = z_score(_quadratic(sigma * noise))
    u = es_delta(noise, seed_coefficients(z, antithetic=False), alpha / 30)
    grad = 2 * torch.tensor(TARGET)
    assert _cos(u, grad) == pytest.approx(0.94322, abs=5e-5)
    assert torch.allclose(u.double(), torch.tensor([4.3458e-4, -1.9733e-4, 1.9346e-4], dtype=torch.float64), atol=5e-9)
    assert np.allclose(u.numpy(), u_np, rtol=1e-5, atol=0)  # fp32 accumulation vs numpy fp64


def test_es_step_with_seeded_noise_follows_the_gradient():
    """The full step (perturb → fitness → z-score → update) on the toy with torch-seeded noise:
    the applied update equals (α/N) Σ z_k ε(seed_k) regenerated from the seeds, and points along ∇F."""
    theta = torch.nn.Parameter(torch.zeros(3))
    params = [("theta", theta)]
    seeds = member_seeds(0, 0, 30)
    result = es_step(params, lambda k: _quadratic(theta.detach()), seeds, sigma=1e-3, alpha=5e-4)
    noise = torch.stack([param_noise("theta", theta, s) for s in seeds])  # (30, 3)
    expected = es_delta(noise, result.z, 5e-4 / 30)
    assert torch.equal(theta.detach(), expected)  # θ was 0: the update is the whole of θ
    assert _cos(theta.detach(), 2 * torch.tensor(TARGET)) > 0.9
    assert result.update_norm == pytest.approx(float(expected.double().norm()), rel=1e-6)


def test_divide_by_sigma_scales_the_update_by_one_over_sigma():
    def run(divide: bool) -> torch.Tensor:
        theta = torch.nn.Parameter(torch.zeros(3))
        es_step([("theta", theta)], lambda k: _quadratic(theta.detach()), member_seeds(0, 0, 8), sigma=0.01,
                alpha=1e-3, divide_by_sigma=divide)
        return theta.detach()
    assert torch.allclose(run(True), run(False) / 0.01, rtol=1e-5, atol=0)


# --- seeds and noise ----------------------------------------------------------------------------

def test_seeds_reproduce_noise_exactly():
    a = seeded_noise((4, 5), 123)
    assert torch.equal(a, seeded_noise((4, 5), 123)) and a.dtype == torch.float32
    assert not torch.equal(a, seeded_noise((4, 5), 124))
    p, q = torch.zeros(4, 5), torch.zeros(4, 5)
    assert torch.equal(param_noise("w", p, 7), param_noise("w", q, 7))  # a function of (name, seed)
    assert not torch.equal(param_noise("w", p, 7), param_noise("v", q, 7))  # own stream per tensor
    assert torch.equal(param_noise("w", p, 7, per_tensor=False), param_noise("v", q, 7, per_tensor=False))
    assert member_seeds(3, 5, 6) == member_seeds(3, 5, 6)
    assert member_seeds(3, 5, 6) != member_seeds(3, 6, 6) and len(set(member_seeds(3, 5, 6))) == 6


def test_perturb_then_restore_is_bit_exact():
    w = torch.nn.Parameter(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)))
    params = [("w", w)]
    before = w.detach().clone()
    saved = snapshot(params)
    perturb(params, 99, 0.5)
    assert torch.equal(w.detach(), before + 0.5 * param_noise("w", w, 99))
    restore(params, saved)
    assert torch.equal(w.detach(), before)


# --- fitness shaping ----------------------------------------------------------------------------

def test_z_score_golden_values():
    """F = (1, 2, 3, 6): mean 3, centred (−2, −1, 0, 3), Σ squares 14.
    ddof 0: std = √3.5 = 1.8708287 → z = (−1.0690450, −0.5345225, 0, 1.6035675).
    ddof 1: std = √(14/3) = 2.1602469 → z = (−0.9258201, −0.4629100, 0, 1.3887301)."""
    f = torch.tensor([1.0, 2.0, 3.0, 6.0])
    z0 = torch.tensor([-1.0690450, -0.5345225, 0.0, 1.6035675], dtype=torch.float64)
    z1 = torch.tensor([-0.9258201, -0.4629100, 0.0, 1.3887301], dtype=torch.float64)
    assert torch.allclose(z_score(f, eps=0.0, ddof=0), z0, atol=1e-7)
    assert torch.allclose(z_score(f, eps=0.0, ddof=1), z1, atol=1e-7)
    # eps in the denominator: z = centred / (std + eps) with eps = 1 → (−2, −1, 0, 3)/2.8708287
    assert torch.allclose(z_score(f, eps=1.0), torch.tensor([-2.0, -1.0, 0.0, 3.0], dtype=torch.float64) / 2.8708287,
                          atol=1e-7)
    assert torch.equal(z_score(torch.full((5,), 0.3)), torch.zeros(5, dtype=torch.float64))  # no signal, no step


def test_antithetic_pairs_combine_per_seed():
    """Members (s1,+), (s1,−), (s2,+), (s2,−) with z = (1, −1, 0.5, 0.5): seed weights (2, 0)."""
    z = torch.tensor([1.0, -1.0, 0.5, 0.5], dtype=torch.float64)
    assert torch.equal(seed_coefficients(z, antithetic=True), torch.tensor([2.0, 0.0], dtype=torch.float64))
    assert torch.equal(seed_coefficients(z, antithetic=False), z)


def test_antithetic_step_evaluates_plus_and_minus():
    """On the toy, member 2j is θ + σε_j and 2j+1 is θ − σε_j (the fitness sees both signs)."""
    theta = torch.nn.Parameter(torch.zeros(3))
    seen: list[torch.Tensor] = []

    def fitness(k: int) -> torch.Tensor:
        seen.append(theta.detach().clone())
        return _quadratic(theta.detach())
    result = es_step([("theta", theta)], fitness, member_seeds(1, 0, 4), sigma=0.1, alpha=0.05, antithetic=True)
    assert len(seen) == 8 and all(torch.equal(seen[2 * j], -seen[2 * j + 1]) for j in range(4))
    assert result.coefficients.shape == (4,) and _cos(theta.detach(), torch.tensor(TARGET)) > 0.5


def test_update_accumulates_in_fp32_for_low_precision_weights():
    """A bf16 parameter gets the fp32 sum cast once: the same as updating an fp32 copy and casting
    (up to one bf16 rounding), and never the sum of separately rounded bf16 terms."""
    seeds, coeffs = member_seeds(0, 1, 30), torch.linspace(-1, 1, 30, dtype=torch.float64)
    w32 = torch.nn.Parameter(torch.ones(64))
    w16 = torch.nn.Parameter(torch.ones(64, dtype=torch.bfloat16))
    apply_update([("w", w32)], seeds, coeffs, 1e-2, per_tensor=True)
    apply_update([("w", w16)], seeds, coeffs, 1e-2, per_tensor=True)
    assert w16.dtype == torch.bfloat16
    assert torch.allclose(w16.detach().float(), w32.detach(), atol=2 ** -7, rtol=0)  # bf16 ulp near 1
    assert not torch.equal(w32.detach(), torch.ones(64))


# --- parameter subsets --------------------------------------------------------------------------

def _tiny() -> torch.nn.Module:
    return build_tiny_model(build_char_tokenizer(), hidden=16, layers=2, heads=2, seed=0)


def _fixed_fitness(k: int) -> torch.Tensor:
    return torch.tensor([float((k * 7) % 5)])  # varied, independent of the weights


def test_subset_selection_only_changes_the_chosen_parameters():
    model = _tiny()
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    params = select_parameters(model, include=[r"layers\.1\.mlp"], exclude=[r"down_proj"])
    chosen = {n for n, _ in params}
    assert chosen == {"model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight"}
    es_step(params, _fixed_fitness, member_seeds(0, 0, 6), sigma=0.01, alpha=0.01)
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), before[name]) != (name in chosen), name


def test_subset_update_equals_the_full_update_on_those_parameters():
    """Noise is keyed by parameter name, so ES on a subset moves those parameters exactly as ES on
    all weights would (same seeds, same fitness)."""
    full, part = _tiny(), _tiny()
    seeds = member_seeds(0, 3, 6)
    es_step(select_parameters(full), _fixed_fitness, seeds, sigma=0.01, alpha=0.01)
    es_step(select_parameters(part, include=["layers\\.0\\."]), _fixed_fitness, seeds, sigma=0.01, alpha=0.01)
    f, p = dict(full.named_parameters()), dict(part.named_parameters())
    assert torch.equal(f["model.layers.0.self_attn.q_proj.weight"], p["model.layers.0.self_attn.q_proj.weight"])
    assert not torch.equal(f["model.layers.1.self_attn.q_proj.weight"], p["model.layers.1.self_attn.q_proj.weight"])


def test_selection_defaults_and_errors():
    model = _tiny()
    names_all = [n for n, _ in select_parameters(model)]
    assert names_all == [n for n, _ in model.named_parameters()]  # tied embedding once
    model.model.embed_tokens.weight.requires_grad_(False)  # frozen base weights (e.g. under LoRA) are skipped
    assert "model.embed_tokens.weight" not in [n for n, _ in select_parameters(model)]
    with pytest.raises(ValueError, match="no parameter matches"):
        select_parameters(model, include=["lora_"])


def test_gather_rows_single_process_and_width_check():
    table = gather_rows({0: torch.tensor([1.0, 0.0]), 1: torch.tensor([0.5, 0.5])}, 2, 1)
    assert torch.equal(table, torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=torch.float64))
    with pytest.raises(ValueError, match="rewards"):
        gather_rows({0: torch.tensor([1.0]), 1: torch.tensor([0.5, 0.5])}, 2, 1)


# --- plug-in and config -------------------------------------------------------------------------

def test_registered_with_conventions_and_defaults():
    assert {"es", "grpo_then_es"} <= set(names("loop"))
    es = build("loop", "es")
    assert isinstance(es, ES) and es.config.sigma == 1e-3 and es.config.population == 30
    assert es.config.step_size == 5e-4  # α = σ/2 by default (docs/methods.md §1.9)
    assert build("loop", "es", alpha=0.01).config.step_size == 0.01
    assert isinstance(build("loop", "grpo_then_es", grpo_steps=10), GRPOThenES)
    with pytest.raises(RegistryError, match="unknown parameter"):
        build("loop", "es", lr=1.0)


@pytest.mark.parametrize("bad", [dict(sigma=0.0), dict(population=1), dict(population=5, antithetic=True),
                                 dict(ddof=2), dict(temperature=-1.0)])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        ESConfig(**bad)
    with pytest.raises(ValueError, match="grpo_steps"):
        GRPOThenES.Config(grpo_steps=0)


def test_rlvr_list_shows_the_loops(capsys):
    from rlvr.cli import main
    assert main(["list", "--kind", "loop"]) == 0
    out = capsys.readouterr().out
    assert "es " in out and "grpo_then_es" in out and "arXiv:2509.24372" in out
