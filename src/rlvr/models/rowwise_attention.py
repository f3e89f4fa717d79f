"""Row-wise sdpa: packed, padding-free passes whose attention stays inside each row, as varlen kernels do.

A packed pass lays a micro-batch's rows end to end in one ``(1, L)`` sequence (``rlvr.packing``) so
the projections, the MLPs, the norms and the output layer compute real tokens only. Attention is the
one place the rows must stay apart. transformers' ``sdpa`` keeps them apart with a block-diagonal
``L x L`` mask, so it computes (and masks away) every pair of tokens from different rows: on CPU that
costs more than the padding it saves. Flash-attention's varlen kernels compute each row alone, but
they need a CUDA GPU and the flash-attn package.

This module registers a transformers attention implementation, :data:`ROWWISE_SDPA`, that does what
the varlen kernels do with plain ``torch.nn.functional.scaled_dot_product_attention``:

- for a packed pass (its ``attention_mask`` is the row index :func:`row_index` builds, a 4-D integer
  tensor that transformers' mask builders hand through untouched, and ``row_layout`` a
  :class:`RowLayout` of its rows in length buckets), each layer gathers the packed queries, keys and
  values of each bucket into ``(n_b, H, W_b, D)`` — one row per batch slot, right-padded to the
  bucket's longest row ``W_b`` — runs causal sdpa (right padding needs no mask under a causal mask: a
  real query never reaches a later column), and gathers the real positions back to ``(1, L, H, D)``;
- for every other call (padded passes, generation with the KV cache), it is transformers' ``sdpa``,
  masks included: the same function on the same inputs.

So attention costs ``sum_b n_b x W_b^2`` score entries (at most 4x the rows' own ``len^2`` in a
bucket whose longest row has 64 tokens or more), never ``L^2``, and every other layer computes ``L``
real positions. Nothing changes in the model's weights, its saved config (``_attn_implementation``
is not written by ``save_pretrained``) or its wrappers: the pass still goes through the model's own
``forward`` (DDP, FSDP2, peft, gradient checkpointing).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

try:  # transformers' attention registries (4.53 and later; older versions keep sdpa as it is)
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
except ImportError:  # pragma: no cover — exercised only with an old transformers
    AttentionInterface = None

ROWWISE_SDPA = "rlvr_rowwise_sdpa"


def row_index(position_ids: Tensor) -> Tensor:
    """(1, 1, n, W) int64: the packed index of row ``i``'s ``w``-th token, -1 past the row's end, from
    packed positions (1, L) that restart at 0 at each row's first token (``rlvr.packing.pack_rows``).
    Handed to the model as its ``attention_mask``."""
    pos = position_ids.reshape(-1)  # (L,)
    length = pos.numel()
    starts = (pos == 0).nonzero().flatten()  # (n,)
    if starts.numel() == 0 or starts[0].item() != 0:
        raise ValueError("row_index: packed positions must start at 0 (rows laid end to end)")
    ends = torch.cat([starts[1:], starts.new_tensor([length])])  # (n,)
    lengths = ends - starts  # (n,)
    width = int(lengths.max())
    cols = torch.arange(width, device=pos.device)  # (W,)
    index = starts[:, None] + cols  # (n, W)
    return torch.where(cols < lengths[:, None], index, -1)[None, None]  # (1, 1, n, W)


def is_row_index(mask: object) -> bool:
    """Whether an ``attention_mask`` reaching the attention function is a :func:`row_index`."""
    return isinstance(mask, Tensor) and mask.dim() == 4 and mask.dtype == torch.int64


MIN_SPLIT_WIDTH = 64  # below this width a bucket takes every shorter row (another sdpa call costs more)


@dataclass(frozen=True)
class RowLayout:
    """How a packed pass's rows go through sdpa: rows sorted longest first in length buckets, each
    right-padded to its own longest row (a new bucket starts at a row at most half as long as the
    bucket's first, while that is at least ``MIN_SPLIT_WIDTH``), so attention computes about the
    rows' own ``sum len^2`` score entries rather than ``n x W^2``."""

    takes: tuple[Tensor, ...]  # per bucket (n_b W_b,) the packed index of each slot (padding slots: 0)
    shapes: tuple[tuple[int, int], ...]  # per bucket (n_b, W_b)
    inverse: Tensor  # (L,) the slot of each packed token in the buckets' outputs laid end to end

    @staticmethod
    def of(index: Tensor) -> RowLayout:
        """The layout of a row index (n, W) (:func:`row_index`'s, without the two leading 1s)."""
        lengths = (index >= 0).sum(-1)  # (n,)
        order = torch.argsort(lengths, descending=True, stable=True).tolist()
        sizes = lengths.tolist()
        buckets: list[list[int]] = []
        for row in order:
            first = sizes[buckets[-1][0]] if buckets else 0
            if not buckets or (sizes[row] * 2 <= first and first >= MIN_SPLIT_WIDTH):
                buckets.append([])
            buckets[-1].append(row)
        inverse = torch.empty(int(lengths.sum()), dtype=torch.long, device=index.device)
        takes, shapes, base = [], [], 0
        for rows in buckets:
            width = sizes[rows[0]]
            part = index[torch.tensor(rows, device=index.device), :width]  # (n_b, W_b)
            real = part >= 0
            slots = base + torch.arange(part.numel(), device=index.device).view(part.shape)  # (n_b, W_b)
            inverse[part[real]] = slots[real]
            takes.append(part.clamp(min=0).flatten())
            shapes.append((len(rows), width))
            base += part.numel()
        return RowLayout(tuple(takes), tuple(shapes), inverse)


def has_sliding_window(config: object) -> bool:
    """Whether a transformers config gives any layer a sliding window (``use_sliding_window``, or a
    ``layer_types`` entry other than full attention)."""
    layer_types = getattr(config, "layer_types", None) or []
    return bool(getattr(config, "use_sliding_window", False)) or any(t != "full_attention" for t in layer_types)


def rowwise_refusal(model: torch.nn.Module) -> str | None:
    """Why row-wise sdpa would not compute ``model``'s attention exactly (None: it would). It computes
    plain causal attention inside each row: a sliding window, a logit soft-cap or attention sinks
    are something else."""
    config = getattr(model, "config", None)
    if has_sliding_window(config):
        return "sliding-window attention"
    if getattr(config, "attn_logit_softcapping", None):
        return "attention logit soft-capping"
    return None


def rowwise_sdpa_forward(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                         attention_mask: Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                         **kwargs) -> tuple[Tensor, None]:
    """transformers' attention-function signature: query (B, H, L, D), key/value (B, Hkv, L, D);
    returns (B, L, H, D). A packed pass (``attention_mask`` a row index, B = 1) runs row by row as the
    module docstring says, in the length buckets of ``row_layout`` (a :class:`RowLayout`, passed to the
    model's forward once per pass; built from the index when absent); anything else is
    ``sdpa_attention_forward`` unchanged."""
    if not is_row_index(attention_mask):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    extra = [k for k in ("sliding_window", "softcap", "s_aux") if kwargs.get(k) is not None]
    if extra:
        raise NotImplementedError(f"row-wise sdpa computes plain causal attention per row; this layer asks for "
                                  f"{', '.join(extra)}: run it with model.attn_implementation=sdpa and "
                                  f"optim.packing=never")
    layout = kwargs.get("row_layout") or RowLayout.of(attention_mask[0, 0])
    groups = query.shape[1] // key.shape[1]
    flat = [x[0].transpose(0, 1) for x in (query, key, value)]  # (L, h, D) each
    outs = []
    for take, (n, width) in zip(layout.takes, layout.shapes, strict=True):
        # (n, h, W, D) per bucket; index_select's backward is an index_add
        q, k, v = (x.index_select(0, take).view(n, width, *x.shape[1:]).transpose(1, 2) for x in flat)
        if groups > 1:  # grouped-query attention: each key/value head serves `groups` query heads
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, scale=scaling)
        heads, dim = out.shape[1], out.shape[3]
        outs.append(out.transpose(1, 2).reshape(n * width, heads, dim))  # (n W, H, D)
    out = outs[0] if len(outs) == 1 else torch.cat(outs)  # (sum n_b W_b, H, D)
    return out.index_select(0, layout.inverse)[None], None  # (1, L, H, D): the real positions, in packed order


def register() -> bool:
    """Make :data:`ROWWISE_SDPA` a transformers attention implementation (its masks: sdpa's); False
    where this transformers has no attention registries (sdpa then stays transformers' own)."""
    if AttentionInterface is None:
        return False
    AttentionInterface.register(ROWWISE_SDPA, rowwise_sdpa_forward)
    AttentionMaskInterface.register(ROWWISE_SDPA, sdpa_mask)
    return True


AVAILABLE = register()
