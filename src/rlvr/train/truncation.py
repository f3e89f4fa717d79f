"""Overlong masking (``algorithm.mask_truncated_completions``): completions the length cap cut off
(no eos within ``rollout.max_new_tokens``) are left out of the loss, as DAPO's "overlong filtering"
(Yu et al., 2025, arXiv:2503.14476, §3.4) and TRL's ``mask_truncated_completions`` do.

Their rewards still count in the group baselines (the advantage stage has run); only the loss mask
changes: ``completion_mask[i] = False`` for every truncated row i, so the trainer's global
normalisers (``num_tokens``, ``num_seqs``) count them as absent, and so does a critic's value loss.
The attention mask is kept, so the forward pass over the batch is unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rlvr.types import Rollouts


def truncated_rows(completion_ids: Tensor, attention: Tensor, eos_ids: Tensor) -> Tensor:
    """(N,) bool: rows whose last real token is not an eos (the length cap ended them).
    ``completion_ids`` (N, T) right-padded, ``attention`` (N, T) bool real tokens, ``eos_ids`` (E,)."""
    lengths = attention.sum(-1)  # (N,)
    last = completion_ids.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)  # (N,)
    return (lengths > 0) & ~torch.isin(last, eos_ids.to(last.device))


def mask_truncated(batch: Rollouts, eos_ids: Tensor) -> float:
    """Clear the loss mask of ``batch``'s truncated rows in place; returns their fraction."""
    cut = truncated_rows(batch.completion_ids, batch.attention, eos_ids)  # (N,)
    if batch.completion_attention is None:  # attention defaulted to the loss mask: keep it
        batch.completion_attention = batch.completion_mask.clone()
    batch.completion_mask = batch.completion_mask & ~cut.unsqueeze(1)  # (N, T)
    return cut.float().mean().item() if cut.numel() else 0.0


def eos_token_ids(model: Any, tokenizer: Any) -> Tensor:
    """(E,) the token ids that end a completion: the model's generation config, else the tokenizer's."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("mask_truncated_completions: neither the model nor the tokenizer has an eos token id")
    return torch.tensor([eos] if isinstance(eos, int) else list(eos), dtype=torch.long)
