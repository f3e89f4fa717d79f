"""Pure tensor math shared by every plug-in: masked reductions, group statistics, log-probs, KL.

No I/O, no models, no distributed calls. Masks are bool, True = trained token. Every statistic
states its estimator: ``ddof`` (0 = population, 1 = unbiased) and ``eps`` are explicit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.types import BatchError

# Positions per float32 chunk of the log-softmax: at a 49,152-token vocabulary a chunk is 0.2 GB (and as
# much again for its exponentials); 4,096 made a packed pass's chunk 0.8 GB. Each position is reduced over
# its own row, so the values do not depend on it (tests/unit/test_ops.py).
CHUNK_TOKENS = 1024

KL_ESTIMATORS = ("k1", "k2", "k3", "abs")


# --- masked reductions ------------------------------------------------------------------------

def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x`` where ``mask``; values at masked-out positions (even NaN) never leak in."""
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` where ``mask``; an empty selection gives 0, not NaN."""
    count = mask.sum(dim=dim).to(x.dtype)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_var(x: Tensor, mask: Tensor, ddof: int = 1) -> Tensor:
    """Variance over all selected entries with ``count - ddof`` in the denominator (0 when undefined)."""
    count = mask.sum().to(x.dtype)
    mean = masked_mean(x, mask)
    sq = masked_sum((x - mean) ** 2, mask)
    return torch.where(count > ddof, sq / (count - ddof).clamp(min=1), torch.zeros_like(sq))


def masked_whiten(x: Tensor, mask: Tensor, ddof: int = 1, eps: float = 1e-8, shift_mean: bool = True) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` over the selected entries (verl's convention: eps inside the root)."""
    mean = masked_mean(x, mask)
    out = (x - mean) * torch.rsqrt(masked_var(x, mask, ddof) + eps)
    return out if shift_mean else out + mean


# --- group statistics -------------------------------------------------------------------------

@dataclass
class GroupStats:
    """Per-row statistics of the row's group (each tensor has shape (N,))."""

    mean: Tensor  # (N,) mean of the group the row belongs to
    std: Tensor  # (N,) std with the requested ddof; 0 for groups too small for it
    count: Tensor  # (N,) group size
    index: Tensor  # (N,) dense group index in [0, num_groups)


def group_stats(x: Tensor, group_ids: Tensor, ddof: int = 1) -> GroupStats:
    """Mean and standard deviation of ``x`` (N,) within groups given by ``group_ids`` (N,).

    Groups need not be contiguous. A group with ``size <= ddof`` has std 0 (defined, not NaN);
    estimators decide what a singleton means for them.
    """
    if x.dim() != 1 or group_ids.shape != x.shape:
        raise BatchError(f"group_stats: x {tuple(x.shape)} and group_ids {tuple(group_ids.shape)} must both be (N,)")
    _, index = torch.unique(group_ids, return_inverse=True)
    g = int(index.max()) + 1 if index.numel() else 0
    xf = x.to(torch.float64)  # small (N,) tensors: exact sums are cheap
    count = torch.zeros(g, dtype=torch.float64, device=x.device).index_add_(0, index, torch.ones_like(xf))
    total = torch.zeros(g, dtype=torch.float64, device=x.device).index_add_(0, index, xf)
    mean = total / count
    sq = torch.zeros(g, dtype=torch.float64, device=x.device).index_add_(0, index, (xf - mean[index]) ** 2)
    var = torch.where(count > ddof, sq / (count - ddof).clamp(min=1), torch.zeros_like(sq))
    dtype = x.dtype if x.is_floating_point() else torch.float32
    return GroupStats(mean[index].to(dtype), var.sqrt()[index].to(dtype), count[index].to(dtype), index)


def broadcast_to_tokens(seq_values: Tensor, mask: Tensor) -> Tensor:
    """(N,) per-sequence values → (N, T) on trained tokens, 0 elsewhere."""
    return seq_values.unsqueeze(-1) * mask.to(seq_values.dtype)


# --- log-probs and entropy --------------------------------------------------------------------

def logprobs_from_logits(logits: Tensor, labels: Tensor, chunk_rows: int = 16, temperature: float = 1.0,
                         chunk_tokens: int = CHUNK_TOKENS) -> Tensor:
    """log softmax(logits / temperature)[labels] for logits (N, T, V), labels (N, T) → (N, T) float32.

    Uses ``x_y − logsumexp(x)`` chunk by chunk (``chunk_rows`` rows, at most ``chunk_tokens``
    positions), casting each chunk to float32 on its own, so no float32 copy of the whole (N, T, V)
    is ever held; under autograd each chunk is recomputed in the backward pass instead of being
    saved, so the graph keeps only the logits themselves (in the model's dtype).
    """
    return _chunked(_chunk_logprobs, logits, labels, chunk_rows, chunk_tokens, temperature)


def entropy_from_logits(logits: Tensor, chunk_rows: int = 16, temperature: float = 1.0,
                        chunk_tokens: int = CHUNK_TOKENS) -> Tensor:
    """Entropy of softmax(logits / temperature) over the last dim, (N, T, V) → (N, T) float32, in
    chunks as :func:`logprobs_from_logits` (differentiable when ``logits`` require grad)."""
    return _chunked(_chunk_entropy, logits, None, chunk_rows, chunk_tokens, temperature)


def logprobs_and_entropy(logits: Tensor, labels: Tensor, chunk_rows: int = 16, temperature: float = 1.0,
                         chunk_tokens: int = CHUNK_TOKENS) -> tuple[Tensor, Tensor]:
    """Both of the above from one float32 copy per chunk, (N, T) each, the entropy differentiable
    too (an entropy bonus): one pass instead of two over the vocabulary."""
    both = _chunked(_chunk_both, logits, labels, chunk_rows, chunk_tokens, temperature)  # (N, T, 2)
    return both[..., 0], both[..., 1]


def _chunk_both(chunk: Tensor, labels: Tensor, temperature: float) -> Tensor:
    x = chunk.float() / temperature  # (n, t, V)
    logp = x.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(x, dim=-1)
    ent = torch.logsumexp(x, dim=-1) - (torch.softmax(x, dim=-1) * x).sum(-1)
    return torch.stack([logp, ent], dim=-1)


def _chunk_logprobs(chunk: Tensor, labels: Tensor, temperature: float) -> Tensor:
    x = chunk.float() / temperature  # (n, t, V) float32, this chunk only
    return x.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(x, dim=-1)


def _chunk_entropy(chunk: Tensor, labels: None, temperature: float) -> Tensor:
    x = chunk.float() / temperature  # (n, t, V)
    return torch.logsumexp(x, dim=-1) - (torch.softmax(x, dim=-1) * x).sum(-1)


def _chunked(fn, logits: Tensor, labels: Tensor | None, chunk_rows: int, chunk_tokens: int,
             temperature: float) -> Tensor:
    """``fn`` over (rows, positions) chunks of ``logits`` (N, T, V), concatenated back to (N, T)."""
    from torch.utils.checkpoint import checkpoint
    n, t = logits.shape[:2]
    step_t = max(1, min(t, chunk_tokens // max(1, min(chunk_rows, n))))
    grad = logits.requires_grad and torch.is_grad_enabled()
    rows_out = []
    for lo in range(0, n, chunk_rows):
        cols = []
        for c in range(0, t, step_t):
            chunk = logits[lo:lo + chunk_rows, c:c + step_t]
            lab = None if labels is None else labels[lo:lo + chunk_rows, c:c + step_t]
            cols.append(checkpoint(fn, chunk, lab, temperature, use_reentrant=False) if grad
                        else fn(chunk, lab, temperature))
        rows_out.append(torch.cat(cols, dim=1) if len(cols) > 1 else cols[0])
    return torch.cat(rows_out, dim=0) if len(rows_out) > 1 else rows_out[0]


# --- KL estimators (Schulman, "Approximating KL divergence", 2020) ----------------------------

def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, kind: str = "k3",
                clamp: float | None = 10.0, straight_through: bool = False) -> Tensor:
    """Per-token estimate of KL(π ‖ π_ref) from sampled tokens' log-probs (N, T) → (N, T).

    k1 = log π − log π_ref; k2 = ½(log π − log π_ref)²; k3 = exp(log π_ref − log π) − (log π_ref − log π) − 1
    (its log-ratio clamped to ±20 before exp, the result to ±``clamp`` when given; verl's
    ``low_var_kl``); abs = |k1|. ``straight_through`` keeps the forward value but takes the
    gradient of k2, the estimator whose gradient is unbiased for the KL gradient.
    """
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator '{kind}'; valid: {', '.join(KL_ESTIMATORS)}")
    diff = logprobs - ref_logprobs
    if kind == "k1":
        value = diff
    elif kind == "abs":
        value = diff.abs()
    elif kind == "k2":
        value = 0.5 * diff.square()
    else:
        log_ratio = (-diff).clamp(-20.0, 20.0)
        value = log_ratio.exp() - log_ratio - 1
        if clamp is not None:
            value = value.clamp(-clamp, clamp)
    if straight_through and kind != "k2":
        surrogate = 0.5 * diff.square()
        value = surrogate - surrogate.detach() + value.detach()
    return value
