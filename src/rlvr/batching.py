"""Joining and splitting ``Rollouts``: concatenation with re-padding, micro-batches by rows."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from rlvr.types import BatchError, Rollouts

_LEFT_PADDED = ("prompt_ids", "prompt_mask")  # prompts are left-padded, everything (N, T) right-padded


def concat_rollouts(parts: list[Rollouts], pad_id: int) -> Rollouts:
    """One batch from several: prompts re-padded on the left, completions on the right.

    Per-row fields must be present in every part or in none.
    """
    if not parts:
        raise BatchError("concat_rollouts: no batches to join")
    if len(parts) == 1:
        return parts[0]
    p = max(r.prompt_ids.shape[1] for r in parts)
    t = max(r.completion_ids.shape[1] for r in parts)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(Rollouts):
        values = [getattr(r, f.name) for r in parts]
        if all(isinstance(v, Tensor) for v in values):
            kwargs[f.name] = torch.cat([_pad(v, f.name, p, t, pad_id) for v in values], dim=0)
        elif any(isinstance(v, Tensor) for v in values):
            raise BatchError(f"concat_rollouts: field '{f.name}' is set in some batches and missing in others")
        elif f.name in ("problems", "texts"):
            kwargs[f.name] = [x for v in values for x in v]
        elif f.name == "meta":
            kwargs[f.name] = {k: v for part in values for k, v in part.items()}
        else:
            kwargs[f.name] = values[0]
    return Rollouts(**kwargs)


def _pad(x: Tensor, name: str, p: int, t: int, pad_id: int) -> Tensor:
    if x.dim() != 2:
        return x
    width = p if name in _LEFT_PADDED else t
    missing = width - x.shape[1]
    if missing <= 0:
        return x
    fill = pad_id if name.endswith("_ids") else 0
    pad = torch.full((x.shape[0], missing), fill, dtype=x.dtype, device=x.device)
    return torch.cat([pad, x] if name in _LEFT_PADDED else [x, pad], dim=1)


def micro_batches(n: int, size: int) -> list[Tensor]:
    """Row indices of consecutive micro-batches of ``size`` rows (``size <= 0``: one batch)."""
    if size <= 0 or size >= n:
        return [torch.arange(n)]
    return [torch.arange(lo, min(lo + size, n)) for lo in range(0, n, size)]


def mini_batches(n: int, m: int) -> list[Tensor]:
    """Row indices of ``m`` mini-batches: mini-batch ``j`` takes every ``m``-th row from row ``j``.

    A fixed interleave (verl shuffles rows instead): each mini-batch holds rows of every group, and
    when every rank's row count is a multiple of ``m``, the union over ranks of mini-batch ``j`` is
    the single-process mini-batch ``j`` of the same global batch, so data-parallel runs take the same
    optimizer steps as one process.
    """
    if n < m:
        raise BatchError(f"optim.mini_batches={m} needs at least {m} rows per rank, the local batch has {n}")
    return [torch.arange(j, n, m) for j in range(m)]
