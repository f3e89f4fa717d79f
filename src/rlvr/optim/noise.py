"""Seeded Gaussian noise: a population member is an integer seed, its noise is regenerated on demand.

Nothing but the seeds is stored: ``ε(seed)`` for a tensor is drawn by a fresh ``torch.Generator``
seeded with ``tensor_seed(seed, index)``, in float32 on the tensor's device, so every process that
holds the same parameters regenerates bit-identical noise (same device type; CPU and CUDA streams
differ).
"""

from __future__ import annotations

import torch
from torch import Tensor

_MIX = 0x9E3779B97F4A7C15  # odd 64-bit constant (golden ratio): spreads tensor indices apart
_MASK = (1 << 63) - 1


def tensor_seed(seed: int, index: int, per_tensor: bool = True) -> int:
    """The generator seed of tensor ``index`` for member ``seed``. With ``per_tensor=False`` every
    tensor uses ``seed`` itself (the ES-at-scale reference does this, so equally shaped tensors get
    equal noise)."""
    if not per_tensor:
        return int(seed) & _MASK
    return (int(seed) * 1_000_003 + (index + 1) * _MIX) & _MASK


def seeded_noise(shape: torch.Size | tuple[int, ...], seed: int, device: torch.device | str = "cpu") -> Tensor:
    """Standard normal noise of ``shape`` in float32, a pure function of ``seed`` (and device type)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float32, device=device)


def member_seeds(run_seed: int, step: int, count: int) -> list[int]:
    """``count`` member seeds of iteration ``step``: a function of (run seed, step) only, so a resumed
    run draws the same population as an uninterrupted one and every rank agrees without talking."""
    gen = torch.Generator().manual_seed((int(run_seed) * 1_000_033 + int(step) * 7_919 + 17) & _MASK)
    return torch.randint(0, 2**31 - 1, (count,), generator=gen).tolist()
