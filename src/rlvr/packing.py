"""Padding-free packing of a micro-batch: its rows laid end to end in one (1, L) sequence, and the
token-budget plan that decides which rows share a sequence.

A row contributes its real prompt tokens and its completion up to its last real token (at least one
completion column, as ``rlvr.batching.trim_padding`` keeps), with positions restarting at 0, so each
row sees exactly the positions the padded pass gives it (``(mask.cumsum(-1) - 1)``). The model must
keep attention inside each row (transformers' packed-sequence masks, ``rlvr.rollout.scoring``);
this module only builds the layout and puts per-token values back where the padded pass puts them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.notice import notice
from rlvr.types import BatchError


@dataclass(frozen=True)
class PackedRows:
    """The packed layout of ``n`` rows with completions of width ``T``."""

    input_ids: Tensor  # (1, L) every row's real prompt tokens, then its completion, row after row
    position_ids: Tensor  # (1, L) 0, 1, ... restarting at the first token of each row
    predict: Tensor  # (K,) packed positions whose logits predict a completion token
    rows: Tensor  # (K,) the row of each predicted completion token
    cols: Tensor  # (K,) its completion column
    targets: Tensor  # (K,) its token id
    shape: tuple[int, int]  # (n, T) of the unpacked per-token fields

    def unpack(self, values: Tensor) -> Tensor:
        """(K,) per predicted token → (n, T) at each token's row and column, 0 elsewhere
        (differentiable; the columns left out are padding, as in ``trim_padding``)."""
        out = torch.zeros(self.shape, dtype=values.dtype, device=values.device)
        return out.index_put((self.rows, self.cols), values)


def packing_problem(prompt_mask: Tensor, attention: Tensor, completion_mask: Tensor) -> str | None:
    """Why these rows cannot be packed exactly, or None. Packing needs every row's real tokens in one
    run: a left-padded prompt with at least one real token, real completion tokens a prefix of the
    row, and no trained token that is not a real one."""
    if (prompt_mask.sum(-1) == 0).any():
        return "a row has no real prompt token"
    if (prompt_mask.long().diff(dim=-1) < 0).any():
        return "a prompt is not left-padded (padding after a real prompt token)"
    if (completion_mask & ~attention).any():
        return "a trained completion token is not a real token (completion_mask outside completion_attention)"
    if (attention.long().diff(dim=-1) > 0).any():
        return "a completion has a padding token before a real one"
    return None


def packed_lengths(prompt_mask: Tensor, attention: Tensor) -> Tensor:
    """(N,) tokens each row takes in a pack: its real prompt tokens and its real completion tokens
    (at least one completion column)."""
    return prompt_mask.long().sum(-1) + attention.long().sum(-1).clamp(min=1)


def pack_rows(prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor, attention: Tensor) -> PackedRows:
    """The packed layout of prompts (n, P) (left-padded) and completions (n, T) (right-padded,
    ``attention`` True on real tokens); see :func:`packing_problem` for what the rows must satisfy."""
    n, p = prompt_ids.shape
    t = completion_ids.shape[1]
    span = (attention.long().sum(-1)).clamp(min=1)  # (n,) completion columns each row keeps
    comp_keep = torch.arange(t, device=attention.device) < span[:, None]  # (n, T)
    keep = torch.cat([prompt_mask.bool(), comp_keep], dim=1)  # (n, P + T)
    ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (n, P + T)
    pos = keep.long().cumsum(-1) - 1  # (n, P + T) position within the row
    flat = keep.flatten().long().cumsum(0).view(n, p + t) - 1  # (n, P + T) packed index of each kept token
    rows, cols = comp_keep.nonzero(as_tuple=True)  # (K,) row-major: the packed order
    predict = flat[:, p:][rows, cols] - 1  # the token before each completion token, in the same row
    return PackedRows(input_ids=ids[keep].view(1, -1), position_ids=pos[keep].view(1, -1), predict=predict,
                      rows=rows, cols=cols, targets=completion_ids[rows, cols], shape=(n, t))


_WARNED: set[int] = set()  # budgets whose over-long rows were already reported


def plan_token_budget(rows: Tensor, lengths: Tensor, budget: int) -> list[Tensor]:
    """Micro-batches (batch row indices) of ``rows`` whose summed ``lengths`` (N,) stay within
    ``budget`` tokens: rows longest first, each into the first micro-batch with room for it
    (first-fit decreasing). A row longer than the budget gets a micro-batch of its own (one notice
    per budget and process)."""
    if budget <= 0:
        raise BatchError(f"plan_token_budget: the token budget must be positive, got {budget}")
    order = rows[torch.sort(lengths[rows], descending=True, stable=True).indices]
    bins: list[list[int]] = []
    room: list[int] = []
    too_long = 0
    for row, length in zip(order.tolist(), lengths[order].tolist()):
        if length > budget:
            too_long += 1
            bins.append([row])
            room.append(0)
            continue
        slot = next((i for i, r in enumerate(room) if r >= length), None)
        if slot is None:
            bins.append([])
            room.append(budget)
            slot = len(bins) - 1
        bins[slot].append(row)
        room[slot] -= length
    if too_long and budget not in _WARNED:
        _WARNED.add(budget)
        notice(f"{too_long} row(s) are longer than the token budget of {budget}; each gets a micro-batch "
               f"of its own (raise optim.max_tokens_per_micro_batch to pack them)")
    return [torch.tensor(b, dtype=rows.dtype, device=rows.device) for b in bins]
