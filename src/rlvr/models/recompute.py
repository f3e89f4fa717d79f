"""What gradient checkpointing recomputes: every op of a decoder layer, or only its elementwise ops.

``model.gradient_checkpointing`` wraps each decoder layer in a non-reentrant checkpoint: the forward
keeps only the layer's input and the backward pass runs the layer again. ``model.recompute`` says how
much of it runs again:

- ``all``: every op (PyTorch's plain checkpoint). Least memory; the backward repeats the whole forward,
  about 30 % more compute per update.
- ``elementwise``: selective activation checkpointing (``torch.utils.checkpoint``'s
  ``create_selective_checkpoint_contexts``). The outputs of the ops in :data:`KEPT_OPS` (matrix
  products and the attention kernels, where the compute is) are kept from the forward; everything else
  (RMSNorm in float32, RoPE, SiLU and the gating product, autocast's casts, reshapes) is recomputed
  from them. On SmolLM2's layer shapes this kept about 40 % of the activation bytes a layer holds
  without checkpointing, for about 10 % more forward + backward time
  (``benchmarks/recompute_memory.py``, docs/training-real-models.md).

Both are exact: the recomputed ops run on the same inputs with the same kernels, so the gradients are
the same bits as without checkpointing (``tests/e2e/test_precision.py`` checks the weights after a step
with tolerance 0).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

RECOMPUTE = ("all", "elementwise")  # model.recompute


def _kept_ops() -> frozenset:
    """The aten overloads whose outputs ``elementwise`` keeps: matrix products and every fused attention
    kernel this torch build has (CPU flash, CUDA flash / memory-efficient / cuDNN)."""
    aten = torch.ops.aten
    names = ("mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_flash_attention_for_cpu",
             "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention")
    return frozenset(getattr(aten, n).default for n in names if hasattr(aten, n))


KEPT_OPS = _kept_ops()


def _keep_products(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    """Selective checkpointing's policy: keep what :data:`KEPT_OPS` computed, recompute the rest."""
    return CheckpointPolicy.MUST_SAVE if op in KEPT_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def checkpoint_kwargs(recompute: str) -> dict[str, Any]:
    """The keyword arguments for ``torch.utils.checkpoint.checkpoint`` (through transformers'
    ``activation_checkpointing_enable``) that recompute ``recompute`` (one of :data:`RECOMPUTE`)."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"model.recompute must be one of {' | '.join(RECOMPUTE)}, got '{recompute}'")
    kwargs: dict[str, Any] = {"use_reentrant": False}
    if recompute == "elementwise":
        kwargs["context_fn"] = partial(create_selective_checkpoint_contexts, _keep_products)
    return kwargs
