"""Loss aggregation (rlvr.aggregation): golden values, equivalences, invariances, splits, errors."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.aggregation import AGGREGATION_MODES, Aggregation, aggregate, global_normalisers, token_weights
from rlvr.types import BatchError

# ℓ (3, 4); row 0 trains 2 tokens, row 1 trains 3, row 2 none (a fully masked row).
LOSS = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [100.0, 100.0, 100.0, 100.0]])
MASK = torch.tensor([[True, True, False, False], [True, True, True, False], [False] * 4])


@pytest.mark.parametrize("mode, kwargs, expected", [
    # Σ m·ℓ = (1+2) + (5+6+7) = 21 over 5 tokens → 4.2
    ("token-mean", {}, 21 / 5),
    # row means 3/2 = 1.5 and 18/3 = 6; S = 2 rows with a trained token (row 2 excluded) → 3.75
    ("seq-mean-token-mean", {}, (1.5 + 6.0) / 2),
    # row sums 3 and 18 → (3 + 18)/2 = 10.5
    ("seq-mean-token-sum", {}, 10.5),
    # as above divided by C = T = 4 (default) → 2.625; by C = 2 → 5.25
    ("seq-mean-token-sum-norm", {}, 10.5 / 4),
    ("seq-mean-token-sum-norm", {"norm": 2.0}, 10.5 / 2),
    # α = 0.5: row weights L^(−0.5) = 2^−½, 3^−½, constant C = T^½ = 2:
    # (3·2^−½ + 18·3^−½) / S / C = (2.1213 + 10.3923) / 2 / 2 = 3.12841
    ("length-power", {"alpha": 0.5}, (3 / math.sqrt(2) + 18 / math.sqrt(3)) / 2 / 2),
])
def test_golden_values(mode, kwargs, expected):
    assert aggregate(LOSS, MASK, mode, **kwargs).item() == pytest.approx(expected, rel=1e-6)
    assert Aggregation(mode=mode, **kwargs)(LOSS, MASK).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("alpha, norm, weights, contributions", [
    # docs/methods.md §2.18 test 1, L = [10, 40]: per-token weight L^(α−1), trajectory weight L^α.
    (0.0, None, [0.1, 0.025], [1.0, 1.0]),  # α = 0: 1/L (C = T^0 = 1)
    (0.5, 1.0, [10 ** -0.5, 40 ** -0.5], [10 ** 0.5, 40 ** 0.5]),  # [0.316, 0.158], [3.16, 6.32]
    (1.0, 1.0, [1.0, 1.0], [10.0, 40.0]),  # α = 1: no length weight
])
def test_length_power_weights_methods_2_18(alpha, norm, weights, contributions):
    mask = torch.zeros(2, 40, dtype=torch.bool)
    mask[0, :10] = True
    mask[1, :40] = True
    # num_seqs = 1 removes the 1/S factor so the weights are f_α(L) itself.
    w = token_weights(mask, "length-power", num_seqs=1, norm=norm, alpha=alpha)
    assert w[0, 0].item() == pytest.approx(weights[0], rel=1e-6)
    assert w[1, 0].item() == pytest.approx(weights[1], rel=1e-6)
    assert w[0, 10:].abs().sum() == 0  # padding gets no weight
    assert w.sum(-1).tolist() == pytest.approx(contributions, rel=1e-6)
    if alpha == 0.5:
        assert w[:, 0].tolist() == pytest.approx([0.316, 0.158], abs=1e-3)


def _random_batch(seed: int = 0, n: int = 8, t: int = 6):
    g = torch.Generator().manual_seed(seed)
    loss = torch.randn(n, t, generator=g)
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    lengths[3] = 0  # one fully masked row
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)
    return loss, mask


@pytest.mark.parametrize("alpha, norm, other, other_kwargs", [
    (0.0, None, "seq-mean-token-mean", {}),
    (1.0, 1.0, "seq-mean-token-sum", {}),
    (1.0, None, "seq-mean-token-sum-norm", {}),  # both default to C = T
    (1.0, 3.0, "seq-mean-token-sum-norm", {"norm": 3.0}),
])
def test_length_power_reduces_to_named_modes(alpha, norm, other, other_kwargs):
    loss, mask = _random_batch()
    got = aggregate(loss, mask, "length-power", alpha=alpha, norm=norm)
    want = aggregate(loss, mask, other, **other_kwargs)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-7)


def test_length_power_between_endpoints_differs():
    loss, mask = _random_batch()
    half = aggregate(loss, mask, "length-power", alpha=0.5, norm=1.0)
    assert not torch.allclose(half, aggregate(loss, mask, "seq-mean-token-mean"))
    assert not torch.allclose(half, aggregate(loss, mask, "seq-mean-token-sum"))


MODE_KWARGS = [(m, {"alpha": 0.5} if m == "length-power" else {}) for m in AGGREGATION_MODES]


@pytest.mark.parametrize("mode, kwargs", MODE_KWARGS)
@pytest.mark.parametrize("junk", [1e30, float("inf"), float("nan")])
def test_masked_positions_change_nothing(mode, kwargs, junk):
    loss, mask = _random_batch(1)
    clean = loss.clone().requires_grad_(True)
    dirty_values = torch.where(mask, loss, torch.full_like(loss, junk))
    dirty = dirty_values.clone().requires_grad_(True)
    a = aggregate(clean, mask, mode, **kwargs)
    b = aggregate(dirty, mask, mode, **kwargs)
    a.backward()
    b.backward()
    assert torch.equal(a, b)
    assert torch.equal(clean.grad, dirty.grad)
    assert clean.grad[~mask].abs().sum() == 0


@pytest.mark.parametrize("mode, kwargs", MODE_KWARGS)
@pytest.mark.parametrize("parts", [1, 2, 4])
def test_micro_batches_with_global_normalisers_sum_to_full_batch(mode, kwargs, parts):
    loss, mask = _random_batch(2)
    full_leaf = loss.clone().requires_grad_(True)
    full = aggregate(full_leaf, mask, mode, **kwargs)
    full.backward()

    leaf = loss.clone().requires_grad_(True)
    norms = global_normalisers(mask)
    total = torch.zeros(())
    for rows in torch.arange(loss.shape[0]).chunk(parts):
        part = aggregate(leaf[rows], mask[rows], mode, **norms, **kwargs)
        part.backward()
        total = total + part.detach()
    assert torch.allclose(total, full.detach(), rtol=1e-6, atol=1e-7)
    assert torch.allclose(leaf.grad, full_leaf.grad, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("mode, kwargs", MODE_KWARGS)
def test_micro_batches_with_local_normalisers_differ(mode, kwargs):
    """The check above can fail: without global normalisers the split changes the value."""
    loss, mask = _random_batch(2)
    full = aggregate(loss, mask, mode, **kwargs)
    local = sum(aggregate(loss[r], mask[r], mode, **kwargs) for r in torch.arange(8).chunk(2))
    assert not torch.allclose(local, full)


@pytest.mark.parametrize("mode, kwargs", MODE_KWARGS)
def test_dp_size_scaling_averages_to_global(mode, kwargs):
    loss, mask = _random_batch(3)
    full_leaf = loss.clone().requires_grad_(True)
    full = aggregate(full_leaf, mask, mode, **kwargs)
    full.backward()
    norms = global_normalisers(mask)
    shard_leaves, shard_losses = [], []
    for rows in torch.arange(8).chunk(2):  # two "ranks"
        leaf = loss[rows].clone().requires_grad_(True)
        value = aggregate(leaf, mask[rows], mode, **norms, dp_size=2, **kwargs)
        value.backward()
        shard_leaves.append(leaf)
        shard_losses.append(value.detach())
    # DDP averages over ranks: mean of the rank losses (and of the gradients) is the global one.
    assert torch.allclose(torch.stack(shard_losses).mean(), full.detach(), rtol=1e-6, atol=1e-7)
    grad = torch.cat([leaf.grad for leaf in shard_leaves]) / 2
    assert torch.allclose(grad, full_leaf.grad, rtol=1e-6, atol=1e-8)


def test_error_per_token_shape_mismatch():
    with pytest.raises(BatchError, match="per_token"):
        aggregate(torch.zeros(3, 5), MASK, "token-mean")


def test_error_non_bool_mask():
    with pytest.raises(BatchError, match="bool"):
        aggregate(LOSS, MASK.float(), "token-mean")


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_error_dp_size_without_normalisers(mode):
    with pytest.raises(BatchError, match="dp_size"):
        aggregate(LOSS, MASK, mode, dp_size=2)


def test_error_unknown_mode():
    with pytest.raises(ValueError, match="unknown aggregation mode 'seq-sum'"):
        aggregate(LOSS, MASK, "seq-sum")
    with pytest.raises(ValueError, match="valid: token-mean"):
        Aggregation(mode="seq-sum")


@pytest.mark.parametrize("mode, kwargs, expected", [
    # horizon C = 12 (the completion cap): row sums 3 and 18 over S = 2 rows → 10.5/12 = 0.875
    ("seq-mean-token-sum-norm", {"horizon": 12.0}, 10.5 / 12),
    # an explicit norm still wins over the horizon: 10.5/2
    ("seq-mean-token-sum-norm", {"horizon": 12.0, "norm": 2.0}, 10.5 / 2),
    # α = 0.5, C_α = 16^½ = 4: (3·2^−½ + 18·3^−½)/2/4 = 1.564206
    ("length-power", {"alpha": 0.5, "horizon": 16.0}, (3 / math.sqrt(2) + 18 / math.sqrt(3)) / 2 / 4),
])
def test_golden_values_with_a_horizon(mode, kwargs, expected):
    assert aggregate(LOSS, MASK, mode, **kwargs).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("mode, kwargs", [("seq-mean-token-sum-norm", {}), ("length-power", {"alpha": 0.5})])
def test_horizon_makes_the_constant_independent_of_padding(mode, kwargs):
    """Rows of 10 and 40 tokens, padded to 40 (one batch) or the short one alone to 10 (its own
    data-parallel rank): with the horizon (completion cap 48) its tokens get the same weight either
    way; with the padded width as C they weigh 48/10× (sum-norm) or √(48/10)× (α = ½) more."""
    short, long_ = torch.ones(1, 10, dtype=torch.bool), torch.ones(1, 40, dtype=torch.bool)
    together = torch.zeros(2, 40, dtype=torch.bool)
    together[0, :10], together[1] = True, True
    norms = {"num_seqs": 2.0, "num_tokens": 50.0}
    one = token_weights(together, mode, horizon=48.0, **norms, **kwargs)  # (2, 40)
    rank0 = token_weights(short, mode, horizon=48.0, **norms, **kwargs)  # (1, 10)
    torch.testing.assert_close(rank0[0], one[0, :10], rtol=0, atol=0)
    padded = token_weights(short, mode, **norms, **kwargs)  # the old default C = T = 10
    assert padded[0, 0].item() / one[0, 0].item() == pytest.approx(
        (48 / 10) if mode == "seq-mean-token-sum-norm" else math.sqrt(48 / 10), rel=1e-6)
