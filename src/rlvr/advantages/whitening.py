"""Batch whitening and batch std that describe the *global* batch under data parallelism.

An estimator that normalises over the batch (GAE, REINFORCE++, GDPO, GRPO with ``scale='batch'``,
SA-MRPO with ``batch_whiten``) returns ``moment_sums`` of the values it normalises from ``batch_stats``;
the trainer sums them over ranks and ``__call__`` reads the mean and variance through ``moments``.
Without summed statistics (one process) every function here is today's local computation, bit for bit
(``masked_whiten``, ``Tensor.std``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.ops import masked_sum, masked_whiten

PREFIX = "whiten"  # keys: whiten_sum, whiten_sq, whiten_count


def moment_sums(x: Tensor, mask: Tensor | None = None) -> dict[str, Tensor]:
    """Σx, Σx² and the count over the selected entries of ``x`` (all entries without ``mask``), float64
    0-d tensors: additive over shards of the batch."""
    xd = x.detach().double()
    if mask is None:
        mask = torch.ones_like(xd, dtype=torch.bool)
    return {f"{PREFIX}_sum": masked_sum(xd, mask), f"{PREFIX}_sq": masked_sum(xd * xd, mask),
            f"{PREFIX}_count": mask.sum().double()}


def moments(sums: dict[str, Tensor], ddof: int) -> tuple[Tensor, Tensor]:
    """(mean, variance with ``count − ddof`` in the denominator) of summed ``moment_sums``, float64 0-d;
    mean 0 for an empty batch and variance 0 when ``count <= ddof`` (as ``masked_var``)."""
    n, total, sq = sums[f"{PREFIX}_count"], sums[f"{PREFIX}_sum"], sums[f"{PREFIX}_sq"]
    mean = total / n.clamp(min=1)
    var = ((sq - n * mean * mean) / (n - ddof).clamp(min=1)).clamp(min=0.0)
    return mean, torch.where(n > ddof, var, torch.zeros_like(var))


def whiten(x: Tensor, mask: Tensor, ddof: int, eps: float, sums: dict[str, Tensor] | None) -> Tensor:
    """``(x − mean)/sqrt(var + eps)`` over the selected entries (verl's convention): of this batch when
    ``sums`` is None (``masked_whiten``), else of the global batch the summed ``sums`` describe."""
    if sums is None:
        return masked_whiten(x, mask, ddof=ddof, eps=eps)
    mean, var = moments(sums, ddof)
    return ((x.double() - mean) * torch.rsqrt(var + eps)).to(x.dtype)


def batch_std(x: Tensor, ddof: int, sums: dict[str, Tensor] | None) -> Tensor:
    """Std of all entries of ``x`` (0 when ``count <= ddof``): of this batch when ``sums`` is None, else
    of the global batch; in ``x``'s dtype."""
    if sums is None:
        return x.std(correction=ddof) if x.numel() > ddof else x.new_zeros(())
    return moments(sums, ddof)[1].sqrt().to(x.dtype)


def batch_mean(x: Tensor, sums: dict[str, Tensor] | None) -> Tensor:
    """Mean of all entries of ``x``: of this batch when ``sums`` is None, else of the global batch."""
    return x.mean() if sums is None else moments(sums, 0)[0].to(x.dtype)
