"""Post-training uniform k-bit quantisation of a flat parameter vector (e.g. a TinyLoRA adapter).

Affine min–max grid: ``step = (max − min)/(2^k − 1)``, ``q = round((x − min)/step) ∈ {0 … 2^k − 1}``,
``x̂ = min + q·step``. Every value moves by at most ``step/2``; values already on the grid come back
exactly. The compressed size is what ``rlvr.analysis.bounds.code_length_bits`` counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Quantized:
    """k-bit codes of a vector plus the grid (origin ``lo`` and ``step``) to decode them."""

    codes: Tensor  # (n,) int64 in [0, 2^bits − 1]
    lo: float
    step: float
    bits: int

    @property
    def num_values(self) -> int:
        return int(self.codes.numel())


def quantize(x: Tensor, bits: int) -> Quantized:
    """Codes of ``x`` (any shape, flattened) on a uniform ``bits``-bit grid spanning [min, max]."""
    if not 1 <= bits <= 32:
        raise ValueError(f"quantize: bits must be in [1, 32], got {bits}")
    flat = x.detach().flatten().double().cpu()
    if flat.numel() == 0:
        raise ValueError("quantize: empty tensor")
    if not torch.isfinite(flat).all():
        raise ValueError("quantize: the tensor holds NaN or infinite values")
    lo, hi = float(flat.min()), float(flat.max())
    levels = 2**bits - 1
    step = (hi - lo) / levels
    if step == 0.0:  # constant vector: one level, decoded exactly
        return Quantized(torch.zeros(flat.shape, dtype=torch.long), lo, 0.0, bits)
    codes = torch.round((flat - lo) / step).clamp(0, levels).long()
    return Quantized(codes, lo, step, bits)


def dequantize(q: Quantized, dtype: torch.dtype = torch.float32) -> Tensor:
    """``lo + codes·step`` as a flat ``dtype`` vector."""
    return (q.lo + q.codes.double() * q.step).to(dtype)
