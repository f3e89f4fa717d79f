"""DARE and TIES merging (docs/methods.md §2.10): golden values, reductions, unbiasedness."""

from __future__ import annotations

import pytest
import torch

from rlvr.optim.merging import (
    LayerwiseMerge, agreeing, dare, disjoint_mean, elect_sign, layer_key, ties_kept, ties_merge, trim_top,
)

# Three directions over four entries. Hand derivation (no trim, ρ = 1):
#   Σ_k Δ_k = [0.5−0.3+0.4, −0.2−0.4+0.1, 0.1+0.2−0.5, 0+0.6−0.7] = [0.6, −0.5, −0.2, −0.1]
#   elected σ = [+, −, −, −]
#   kept: e0 {0.5, 0.4} → mean 0.45; e1 {−0.2, −0.4} → −0.3; e2 {−0.5} → −0.5; e3 {−0.7} → −0.7
#   (Δ_2's +0.6 on e3 is outvoted by Δ_3's −0.7; Δ_1's 0 on e3 never counts.)
DELTAS = torch.tensor([[0.5, -0.2, 0.1, 0.0],
                       [-0.3, -0.4, 0.2, 0.6],
                       [0.4, 0.1, -0.5, -0.7]], dtype=torch.float64)


def test_ties_sign_election_golden():
    assert torch.equal(elect_sign(DELTAS), torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=torch.float64))
    keep = agreeing(DELTAS, elect_sign(DELTAS))
    assert keep.tolist() == [[True, True, False, False], [False, True, False, False], [True, False, True, True]]
    torch.testing.assert_close(ties_merge(DELTAS, keep_rho=1.0),
                               torch.tensor([0.45, -0.3, -0.5, -0.7], dtype=torch.float64))


def test_ties_with_trimming_golden():
    # ρ = 0.5 keeps the 2 largest |entries| of each direction:
    #   Δ_1 → [0.5, −0.2, 0, 0], Δ_2 → [0, −0.4, 0, 0.6], Δ_3 → [0, 0, −0.5, −0.7]
    #   sum = [0.5, −0.6, −0.5, −0.1] → σ = [+, −, −, −]
    #   e0 {0.5} → 0.5 (Δ_3's 0.4 was trimmed); e1 → −0.3; e2 → −0.5; e3 → −0.7
    assert torch.equal(trim_top(DELTAS[2], 0.5), torch.tensor([0.0, 0.0, -0.5, -0.7], dtype=torch.float64))
    torch.testing.assert_close(ties_merge(DELTAS, keep_rho=0.5),
                               torch.tensor([0.5, -0.3, -0.5, -0.7], dtype=torch.float64))


def test_trim_keeps_exactly_ceil_rho_n_entries_and_rho_one_is_identity():
    x = torch.tensor([0.1, -0.9, 0.3, 0.3, -0.2])
    assert (trim_top(x, 0.5) != 0).sum() == 3  # ceil(0.5 · 5)
    assert (trim_top(x, 0.01) != 0).sum() == 1 and trim_top(x, 0.01)[1] == -0.9
    assert torch.equal(trim_top(x, 1.0), x)
    with pytest.raises(ValueError, match="keep_rho"):
        trim_top(x, 0.0)


def test_disjoint_mean_ignores_zeros():
    kept = torch.tensor([[2.0, 0.0, 0.0], [4.0, 1.0, 0.0]])
    assert torch.equal(disjoint_mean(kept), torch.tensor([3.0, 1.0, 0.0]))


def test_dare_drop_zero_is_identity_and_rejects_bad_p():
    x = torch.randn(7)
    assert torch.equal(dare(x, 0.0), x)
    with pytest.raises(ValueError, match="drop_p"):
        dare(x, 1.0)


def test_dare_is_unbiased_and_keeps_one_minus_p():
    delta = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    draws = torch.stack([dare(delta, 0.75, gen) for _ in range(20000)])  # (20000, 3)
    # E[M/(1−p)] = 1: the Monte Carlo mean is within ~4 standard errors (sd per entry = |Δ|·√3).
    torch.testing.assert_close(draws.mean(0), delta, atol=4 * 2.0 * 3**0.5 / 20000**0.5, rtol=0)
    kept = (draws != 0).double().mean()
    assert abs(kept.item() - 0.25) < 0.01
    assert set(torch.unique(draws[:, 0]).tolist()) == {0.0, 4.0}  # 1/(1 − 0.75) rescale


def _tiny_state(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {name: torch.randn(3, 2, generator=gen)
            for name in ("model.layers.0.attn.q.weight", "model.layers.1.attn.q.weight", "model.layers.10.mlp.weight")}


def test_merge_one_direction_coefficient_one_gives_that_model_exactly():
    base, tuned = _tiny_state(0), _tiny_state(1)
    delta = {k: tuned[k].double() - base[k].double() for k in base}
    for granularity in ("layer_direction", "direction", "layer"):
        merge = LayerwiseMerge(base, [delta], drop_p=0.0, keep_rho=1.0, granularity=granularity)
        out = merge.weights(torch.ones(merge.shape))
        for k in base:
            assert torch.equal(out[k], tuned[k]), (granularity, k)
            assert torch.equal(out[k], (base[k].double() + delta[k]).float())
        zero = merge.weights(torch.zeros(merge.shape))
        assert all(torch.equal(zero[k], base[k]) for k in base)


def test_merge_coefficients_are_per_layer_and_direction():
    base = {"model.layers.0.w": torch.zeros(2), "model.layers.1.w": torch.zeros(2)}
    d1 = {"model.layers.0.w": torch.tensor([1.0, 0.0]), "model.layers.1.w": torch.tensor([2.0, 0.0])}
    d2 = {"model.layers.0.w": torch.tensor([0.0, 3.0]), "model.layers.1.w": torch.tensor([0.0, 4.0])}
    merge = LayerwiseMerge(base, [d1, d2], drop_p=0.0, keep_rho=1.0)
    assert merge.layers == ["layers.0", "layers.1"] and merge.shape == (2, 2)
    out = merge.weights([[1.0, 0.5], [0.0, 2.0]])  # c[l, k]
    assert out["model.layers.0.w"].tolist() == [1.0, 1.5] and out["model.layers.1.w"].tolist() == [0.0, 8.0]
    shared = LayerwiseMerge(base, [d1, d2], drop_p=0.0, keep_rho=1.0, granularity="direction")
    assert shared.shape == (2,) and shared.weights([2.0, 1.0])["model.layers.1.w"].tolist() == [4.0, 4.0]


def test_merge_layer_granularity_uses_the_disjoint_mean():
    base = {"model.layers.0.w": torch.zeros(2)}
    d1, d2 = {"model.layers.0.w": torch.tensor([1.0, 2.0])}, {"model.layers.0.w": torch.tensor([3.0, -1.0])}
    merge = LayerwiseMerge(base, [d1, d2], drop_p=0.0, keep_rho=1.0, granularity="layer")
    # σ = [+, +]; e0 mean(1, 3) = 2; e1 keeps only 2 (the −1 disagrees) → 2; times c = 0.5
    assert merge.weights([0.5])["model.layers.0.w"].tolist() == [1.0, 1.0]


def test_merge_is_deterministic_in_its_seed():
    base, tuned = _tiny_state(0), _tiny_state(1)
    delta = {k: tuned[k].double() - base[k].double() for k in base}
    a = LayerwiseMerge(base, [delta], drop_p=0.5, keep_rho=0.5, seed=3).weights([1.0, 1.0, 1.0])
    b = LayerwiseMerge(base, [delta], drop_p=0.5, keep_rho=0.5, seed=3).weights([1.0, 1.0, 1.0])
    c = LayerwiseMerge(base, [delta], drop_p=0.5, keep_rho=0.5, seed=4).weights([1.0, 1.0, 1.0])
    assert all(torch.equal(a[k], b[k]) for k in a) and any(not torch.equal(a[k], c[k]) for k in a)


def test_layer_key_and_natural_layer_order():
    assert layer_key("model.layers.12.self_attn.q_proj.weight") == "layers.12"
    assert layer_key("model.embed_tokens.weight") == "model.embed_tokens.weight"
    merge = LayerwiseMerge(_tiny_state(0), [_tiny_state(1)], drop_p=0.0, keep_rho=1.0)
    assert merge.layers == ["layers.0", "layers.1", "layers.10"]


def test_ties_kept_zeroes_disagreeing_entries():
    kept = ties_kept(DELTAS, keep_rho=1.0)
    assert kept[1].tolist() == [0.0, -0.4, 0.0, 0.0]  # Δ_2 agrees with σ only on e1
