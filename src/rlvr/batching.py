"""Joining and splitting ``Rollouts``: concatenation with re-padding, micro-batches by rows, and the
update's micro-batch plan (rows left out, rows sorted by length, padding trimmed, or rows packed
under a token budget: ``rlvr.packing``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from rlvr.packing import packed_lengths, plan_token_budget
from rlvr.types import LIST_FIELDS, TOKEN_FIELDS, BatchError, Rollouts

# Prompts (the policy's and the critic's view) are left-padded, everything (N, T[, ...]) right-padded.
_LEFT_PADDED = ("prompt_ids", "prompt_mask", "value_prompt_ids", "value_prompt_mask")


def concat_rollouts(parts: list[Rollouts], pad_id: int) -> Rollouts:
    """One batch from several: prompts re-padded on the left, completions on the right.

    Per-row fields must be present in every part or in none.
    """
    if not parts:
        raise BatchError("concat_rollouts: no batches to join")
    if len(parts) == 1:
        return parts[0]
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(Rollouts):
        values = [getattr(r, f.name) for r in parts]
        if all(isinstance(v, Tensor) for v in values):
            kwargs[f.name] = _cat(values, f.name, pad_id)
        elif any(isinstance(v, Tensor) for v in values):
            raise BatchError(f"concat_rollouts: field '{f.name}' is set in some batches and missing in others")
        elif f.name in ("problems", *LIST_FIELDS):
            kwargs[f.name] = _join(values, [r.num_rows for r in parts], f.name)
        elif f.name == "row_stats":
            names = set(values[0])
            if any(set(v) != names for v in values):
                raise BatchError(f"concat_rollouts: row_stats differ between batches ({[sorted(v) for v in values]})")
            kwargs[f.name] = {k: torch.cat([v[k] for v in values]) for k in values[0]}
        elif f.name == "meta":
            kwargs[f.name] = {k: v for part in values for k, v in part.items()}
        else:
            kwargs[f.name] = values[0]
    return Rollouts(**kwargs)


def _join(values: list[list], rows: list[int], name: str) -> list:
    """The parts' per-row lists end to end (N,); a list present in some parts with rows and not in others
    would leave the joined one misaligned."""
    present = [bool(v) for v, n in zip(values, rows) if n]
    if any(present) and not all(present):
        raise BatchError(f"concat_rollouts: field '{name}' is set in some batches and missing in others")
    return [x for v in values for x in v]


def _cat(values: list[Tensor], name: str, pad_id: int) -> Tensor:
    """The parts of one field stacked by rows; (N, W[, ...]) parts padded along W to the widest."""
    if values[0].dim() < 2:
        return torch.cat(values, dim=0)
    width = max(v.shape[1] for v in values)
    return torch.cat([_pad(v, name, width, pad_id) for v in values], dim=0)


def _pad(x: Tensor, name: str, width: int, pad_id: int) -> Tensor:
    missing = width - x.shape[1]
    if missing <= 0:
        return x
    fill = pad_id if name.endswith("_ids") else float("nan") if name == "turn_baselines" else 0  # NaN = none
    pad = torch.full((x.shape[0], missing, *x.shape[2:]), fill, dtype=x.dtype, device=x.device)
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


# (N, T) per-row completion fields of ``Rollouts`` (cut on the right); the prompt fields are cut on the left.
_COMPLETION_FIELDS = ("completion_ids", "completion_mask", *TOKEN_FIELDS, "hidden")


def row_lengths(batch: Rollouts) -> Tensor:
    """(N,) positions each row needs in a forward: its real prompt tokens plus its completion up to
    the last real or trained token (what a micro-batch of this row alone would be trimmed to)."""
    prompt = batch.prompt_mask.shape[1] - first_true(batch.prompt_mask)  # (N,) left-padded
    return prompt + last_true(batch.attention | batch.completion_mask) + 1


def first_true(x: Tensor) -> Tensor:
    """(N,) index of the first True in each row of ``x`` (N, W); W when a row has none."""
    w = x.shape[1]
    idx = torch.where(x, torch.arange(w, device=x.device), torch.full_like(x, w, dtype=torch.long))
    return idx.min(-1).values


def last_true(x: Tensor) -> Tensor:
    """(N,) index of the last True in each row of ``x`` (N, W); -1 when a row has none."""
    idx = torch.where(x, torch.arange(x.shape[1], device=x.device), torch.full_like(x, -1, dtype=torch.long))
    return idx.max(-1).values


def trim_padding(batch: Rollouts) -> Rollouts:
    """``batch`` cut to its own longest row: leading prompt columns that are padding in every row and
    trailing completion columns that are neither real nor trained in any row go.

    Exact for scoring: positions count real tokens only (``rlvr.rollout.scoring``), causal attention
    never looks right, and the cut columns were masked out of every row's attention.
    """
    p0 = int(first_true(batch.prompt_mask.any(0, keepdim=True))[0].clamp(max=batch.prompt_mask.shape[1] - 1))
    t1 = int(last_true((batch.attention | batch.completion_mask).any(0, keepdim=True))[0]) + 1
    t1 = max(t1, 1)  # at least one completion column
    if p0 == 0 and t1 == batch.completion_mask.shape[1]:
        return batch
    cut: dict[str, Any] = {"prompt_ids": batch.prompt_ids[:, p0:], "prompt_mask": batch.prompt_mask[:, p0:]}
    for name in _COMPLETION_FIELDS:
        value = getattr(batch, name)
        if value is not None:
            cut[name] = value[:, :t1]
    return dataclasses.replace(batch, **cut)


def kept_rows(rows: Tensor, keep: Tensor | None, lengths: Tensor | None = None) -> Tensor:
    """The rows of ``rows`` where ``keep`` (N,) is True (all without it); if none is, the one row with
    the fewest ``lengths`` (the first without them) stays: every rank must still run one backward."""
    if keep is None:
        return rows
    kept = rows[keep[rows]]
    if kept.numel() == 0:
        kept = rows[:1] if lengths is None else rows[lengths[rows].argmin()].view(1)
    return kept


BUCKET_ROWS = 8  # fewest rows of a length bucket: smaller ones cost more in passes than they save in padding


def plan_micro_batches(rows: Tensor, size: int, *, keep: Tensor | None = None,
                       lengths: Tensor | None = None, buckets: int = 1) -> list[Tensor]:
    """Micro-batches (batch row indices) of the mini-batch ``rows`` (a 1-D long tensor).

    ``keep`` (N,) bool over the batch: rows where it is False are left out; if none is left, the one
    row with the fewest positions stays (every rank must still run one backward, and every parameter
    must still get a gradient, zero or not). ``lengths`` (N,): rows are sorted longest first, so each
    micro-batch can be trimmed to rows of similar length (``trim_padding``); where ``size`` would give
    one micro-batch, ``buckets`` > 1 splits the sorted rows into up to that many of (near) equal row
    count, each of at least ``BUCKET_ROWS`` rows.
    With neither, the consecutive micro-batches of ``micro_batches``.
    """
    rows = kept_rows(rows, keep, lengths)
    one = size <= 0 or size >= rows.numel()
    parts = min(buckets, rows.numel() // BUCKET_ROWS) if one else 0  # length buckets of one micro-batch
    if lengths is None or (one and parts <= 1):  # row order stays as it was
        return [rows[idx] for idx in micro_batches(rows.numel(), size)]
    rows = rows[torch.sort(lengths[rows], descending=True, stable=True).indices]
    if one:
        return list(torch.tensor_split(rows, parts))
    return [rows[idx] for idx in micro_batches(rows.numel(), size)]


def plan_padded_budget(rows: Tensor, lengths: Tensor, budget: int) -> list[Tensor]:
    """Padded micro-batches of ``rows`` within ``budget`` positions each: rows longest first, each
    micro-batch as many consecutive rows as fit ``rows × its longest row`` (trimmed by
    ``trim_padding``) in the budget, at least one (a longer row gets one of its own)."""
    if budget <= 0:
        raise BatchError(f"plan_padded_budget: the token budget must be positive, got {budget}")
    order = rows[torch.sort(lengths[rows], descending=True, stable=True).indices]
    out, start = [], 0
    sizes = lengths[order].tolist()
    while start < len(sizes):
        take = max(1, budget // max(sizes[start], 1))  # the first row is the micro-batch's longest
        out.append(order[start:start + take])
        start += take
    return out


class UpdatePlan:
    """One batch's micro-batch plan: which rows a pass computes (``keep``), in what order
    (``lengths``: longest first, each micro-batch trimmed to its own longest row), whether each
    micro-batch is one packed, padding-free sequence (``packed``), how large a micro-batch may be
    (``budget`` > 0: at most that many positions, packed or padded, instead of ``size`` rows), and
    what it computed (rows, positions and real tokens, for the ``update/…`` metrics)."""

    def __init__(self, size: int, keep: Tensor | None = None, lengths: Tensor | None = None,
                 buckets: int = 1, budget: int = 0, packed: bool = False) -> None:
        if (packed or budget > 0) and lengths is None:
            raise BatchError("UpdatePlan: packing and a token budget need the rows' lengths")
        self.size, self.keep, self.lengths, self.buckets = size, keep, lengths, buckets
        self.budget, self.packed = budget, packed
        self.rows = self.positions = self.real = 0

    def micro_batches(self, rows: Tensor) -> list[Tensor]:
        if self.budget > 0:
            kept = kept_rows(rows, self.keep, self.lengths)
            plan = plan_token_budget if self.packed else plan_padded_budget
            return plan(kept, self.lengths, self.budget)
        return plan_micro_batches(rows, self.size, keep=self.keep, lengths=self.lengths, buckets=self.buckets)

    def view(self, batch: Rollouts, rows: Tensor) -> Rollouts:
        """The micro-batch ``rows`` of ``batch``: trimmed when the plan sorts by length."""
        part = batch.select(rows)
        return part if self.lengths is None else trim_padding(part)

    def count(self, part: Rollouts) -> None:
        self.rows += part.num_rows
        if self.packed:  # one padding-free sequence
            self.positions += int(packed_lengths(part.prompt_mask, part.attention).sum())
        else:
            self.positions += part.num_rows * (part.prompt_ids.shape[1] + part.completion_ids.shape[1])
        self.real += int(part.prompt_mask.sum()) + int(part.attention.sum())

    def metrics(self, planned_rows: int) -> dict[str, float]:
        """``update/skipped_row_frac`` (rows of ``planned_rows`` not computed), ``update/padding_frac``
        (computed positions that were padding) and ``update/tokens`` (positions computed)."""
        return {"update/skipped_row_frac": 1.0 - self.rows / max(planned_rows, 1),
                "update/padding_frac": 1.0 - self.real / max(self.positions, 1),
                "update/tokens": float(self.positions)}
