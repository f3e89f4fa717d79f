"""Tolerances for comparing two float32 computations of the same update done in a different order.

Two ways of computing one update — 2 data-parallel ranks against 1 process, trimmed against padded
micro-batches, another thread count or another CPU's kernels — add the same terms in a different
order. The bound comes from that, not from what one machine happened to give:

- float32 rounds each operation with unit roundoff ``u = 2**-24 ≈ 6e-8``, and the worst-case error of
  a sum of ``n`` terms in any order is ``n·u`` relative to the sum of their magnitudes;
- a gradient entry of the tiny test models sums at most ~16k terms (rows × positions × the hidden units
  feeding it), so two orders may disagree by up to ``16384·u ≈ 1e-3`` relative (seen: 3e-7 to 8e-6);
- AdamW divides each gradient entry by its own running RMS, so that relative error reaches the update
  almost unchanged — except on entries whose gradient is within rounding of zero, where the division
  magnifies it to as much as the learning rate. Such entries are few and carry little of the update's
  norm, so the comparison is of whole updates in the L2 norm, ``‖Δa − Δb‖ / ‖Δb‖``, never element-wise
  against a fixed absolute bar.

A real difference (a row dropped, a mask off by one, another aggregation) changes the update by tens of
percent: token-mean against seq-mean-token-mean on the exact-savings batch is 0.73 apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

U32 = 2.0 ** -24  # float32 unit roundoff


def sum_rtol(n_terms: int) -> float:
    """Worst-case relative disagreement of two summation orders of ``n_terms`` float32 terms."""
    return n_terms * U32


UPDATE_RTOL = sum_rtol(16_384)  # ≈ 1e-3: weights after an update, relative to the update's size
LOSS_RTOL = sum_rtol(256)  # ≈ 1.5e-5: a loss averaged over at most ~256 per-token terms


def _flat(x: Mapping | Sequence | torch.Tensor) -> torch.Tensor:
    """One float64 vector of a state dict (keys sorted), a list of floats or a tensor."""
    if isinstance(x, Mapping):
        return torch.cat([torch.as_tensor(x[k]).double().flatten() for k in sorted(x)])
    return torch.as_tensor(x).double().flatten()


def update_gap(after_a, after_b, before) -> float:
    """``‖(a − before) − (b − before)‖₂ / ‖b − before‖₂``: how far two updates of the same start differ,
    relative to the size of the update (``before`` may be any earlier point of ``b``'s trajectory)."""
    a, b, start = _flat(after_a), _flat(after_b), _flat(before)
    assert a.shape == b.shape == start.shape, (a.shape, b.shape, start.shape)
    moved = (b - start).norm()
    assert moved > 0, "the update did not move the weights: nothing is compared"
    return ((a - b).norm() / moved).item()


def assert_same_update(after_a, after_b, before, rtol: float = UPDATE_RTOL) -> None:
    gap = update_gap(after_a, after_b, before)
    assert gap <= rtol, f"the updates differ by {gap:.3g} of their size (float32 reordering allows {rtol:.3g})"


def assert_same_loss(a: float, b: float, scale: float = 1.0, rtol: float = LOSS_RTOL) -> None:
    """Two orders of the same float32 loss agree within ``rtol`` of the magnitude of the terms summed,
    ``scale`` (not of the result: a group-relative loss at ratio 1 cancels to ~0 and its value is then
    rounding alone). The test losses average per-token terms of size ≲ 1 (|A|·ratio), so ``scale`` = 1."""
    assert abs(a - b) <= rtol * max(scale, abs(a), abs(b)), (a, b)
