"""Golden values for ops.py: masked reductions, whitening, group statistics, KL estimators,
log-probs. Every expected number is derived by hand in the comment above it."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr import BatchError
from rlvr.ops import (broadcast_to_tokens, entropy_from_logits, group_stats, kl_estimate,
                      logprobs_from_logits, masked_mean, masked_sum, masked_var, masked_whiten)

X = torch.tensor([[1.0, 2.0], [3.0, 100.0]])
M = torch.tensor([[True, True], [True, False]])


# --- masked reductions ------------------------------------------------------------------------

def test_masked_mean_golden():
    # selected 1, 2, 3 → 2; per row: (1+2)/2 = 1.5, 3/1 = 3.
    assert masked_mean(X, M).item() == 2.0
    assert torch.equal(masked_mean(X, M, dim=-1), torch.tensor([1.5, 3.0]))


def test_masked_mean_of_empty_selection_is_zero():
    assert masked_mean(X, torch.zeros_like(M)).item() == 0.0


def test_masked_sum_ignores_nan_outside_mask():
    # NaN at the untrained position must not leak: 1 + 2 + 3 = 6.
    x = X.clone()
    x[1, 1] = float("nan")
    assert masked_sum(x, M).item() == 6.0


def test_masked_var_golden():
    # selected 1, 2, 3: mean 2, squared deviations 1 + 0 + 1 = 2 → ddof 1: 2/2 = 1; ddof 0: 2/3.
    assert masked_var(X, M, ddof=1).item() == pytest.approx(1.0)
    assert masked_var(X, M, ddof=0).item() == pytest.approx(2 / 3)


def test_masked_var_too_few_entries_is_zero_not_nan():
    # one selected entry: count 1 ≤ ddof 1 → 0 (defined), population variance 0 as well.
    one = torch.tensor([[True, False], [False, False]])
    assert masked_var(X, one, ddof=1).item() == 0.0
    assert masked_var(X, one, ddof=0).item() == 0.0


def test_masked_whiten_golden():
    # selected 1, 2, 3: mean 2, unbiased var 1 → (−1, 0, 1)/sqrt(1 + 1e-8); with shift_mean=False
    # the mean is added back: (1, 2, 3).
    w = masked_whiten(X, M)
    torch.testing.assert_close(w[M], torch.tensor([-1.0, 0.0, 1.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(masked_whiten(X, M, shift_mean=False)[M], torch.tensor([1.0, 2.0, 3.0]))
    # ddof 0: var 2/3 → (−1, 0, 1)·sqrt(1.5) = (−1.22474, 0, 1.22474)
    torch.testing.assert_close(masked_whiten(X, M, ddof=0)[M], torch.tensor([-1.0, 0.0, 1.0]) * math.sqrt(1.5))


def test_broadcast_to_tokens_golden():
    out = broadcast_to_tokens(torch.tensor([2.0, -1.0]), M)
    assert torch.equal(out, torch.tensor([[2.0, 2.0], [-1.0, 0.0]]))


# --- group statistics -------------------------------------------------------------------------

# x = (1, 0, 4, 2, 7), ids (5, 9, 5, 9, 3): groups 5 → {1, 4}, 9 → {0, 2}, 3 → {7} (non-contiguous).
GX = torch.tensor([1.0, 0.0, 4.0, 2.0, 7.0])
GID = torch.tensor([5, 9, 5, 9, 3])


def test_group_stats_golden_unbiased():
    # group 5: mean 2.5, squares 2.25 + 2.25 = 4.5 → ddof 1 var 4.5, sd 2.12132;
    # group 9: mean 1, squares 1 + 1 = 2 → sd 1.41421; group 3 (size 1 ≤ ddof): sd 0, not NaN.
    s = group_stats(GX, GID, ddof=1)
    torch.testing.assert_close(s.mean, torch.tensor([2.5, 1.0, 2.5, 1.0, 7.0]))
    torch.testing.assert_close(s.std, torch.tensor([math.sqrt(4.5), math.sqrt(2), math.sqrt(4.5), math.sqrt(2), 0.0]))
    assert torch.equal(s.count, torch.tensor([2.0, 2.0, 2.0, 2.0, 1.0]))
    # dense index over sorted ids (3, 5, 9)
    assert torch.equal(s.index, torch.tensor([1, 2, 1, 2, 0]))
    assert torch.isfinite(s.std).all()


def test_group_stats_golden_population():
    # ddof 0: group 5 var 4.5/2 = 2.25 → sd 1.5; group 9 var 2/2 = 1 → sd 1; singleton sd 0.
    s = group_stats(GX, GID, ddof=0)
    torch.testing.assert_close(s.std, torch.tensor([1.5, 1.0, 1.5, 1.0, 0.0]))


def test_group_stats_integer_input_gives_float():
    s = group_stats(torch.tensor([1, 0]), torch.tensor([0, 0]))
    assert s.mean.dtype == torch.float32 and s.mean[0].item() == 0.5


def test_group_stats_identical_values_have_exactly_zero_std():
    # 0.1 is not exact in binary; the deviations are still exactly 0, so zero-std filters can use std > 0.
    s = group_stats(torch.full((4,), 0.1), torch.zeros(4, dtype=torch.long))
    assert (s.std == 0).all()


def test_group_stats_shape_mismatch_raises():
    with pytest.raises(BatchError, match="group_stats"):
        group_stats(GX, GID[:4])
    with pytest.raises(BatchError, match="group_stats"):
        group_stats(GX.unsqueeze(0), GID.unsqueeze(0))


# --- KL estimators and log-probs --------------------------------------------------------------

def test_kl_estimators_golden():
    # log π = log 0.5, log π_ref = log 0.25: d = log 2 = 0.693147.
    # k1 = d; k2 = d²/2 = 0.240227; k3 = e^{−d} + d − 1 = 0.5 + 0.693147 − 1 = 0.193147; abs = |d|.
    lp, ref = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]])
    d = math.log(2)
    assert kl_estimate(lp, ref, "k1").item() == pytest.approx(d)
    assert kl_estimate(lp, ref, "k2").item() == pytest.approx(d * d / 2)
    assert kl_estimate(lp, ref, "k3").item() == pytest.approx(0.5 + d - 1)
    assert kl_estimate(ref, lp, "abs").item() == pytest.approx(d)
    with pytest.raises(ValueError, match="k4"):
        kl_estimate(lp, ref, "k4")


def test_logprobs_and_entropy_golden():
    # logits (0, log 3) → softmax (1/4, 3/4): log-prob of token 1 = log 0.75;
    # entropy = −(0.25 log 0.25 + 0.75 log 0.75) = 0.562335. Uniform over 4 → log 4.
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, 0.0]]])  # (1, 2, 2)
    lp = logprobs_from_logits(logits, torch.tensor([[1, 0]]), chunk_rows=1)
    torch.testing.assert_close(lp, torch.tensor([[math.log(0.75), math.log(0.5)]]))
    ent = entropy_from_logits(logits)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(ent, torch.tensor([[h, math.log(2.0)]]))
    assert entropy_from_logits(torch.zeros(1, 1, 4)).item() == pytest.approx(math.log(4))


def test_chunk_size_leaves_logprobs_and_their_gradients_unchanged_bit_for_bit():
    """The chunk size bounds memory only: each position's log-softmax is computed from its own row, so
    values and gradients are identical (tolerance 0) whether the positions go in chunks of 4,096, the
    default or 7 (a packed (1, K, V) pass and a padded (N, T, V) one)."""
    from rlvr.ops import CHUNK_TOKENS
    gen = torch.Generator().manual_seed(0)
    for shape in ((1, 300, 97), (8, 21, 97)):
        logits = torch.randn(*shape, generator=gen).bfloat16()
        labels = torch.randint(0, shape[-1], shape[:2], generator=gen)
        weight = torch.randn(shape[:2], generator=gen)
        outs = []
        for chunk in (4096, CHUNK_TOKENS, 7):
            x = logits.clone().requires_grad_()
            lp = logprobs_from_logits(x, labels, chunk_tokens=chunk, temperature=0.7)
            (lp * weight).sum().backward()
            outs.append((lp.detach(), x.grad))
        for lp, grad in outs[1:]:
            assert torch.equal(lp, outs[0][0]) and torch.equal(grad, outs[0][1])
