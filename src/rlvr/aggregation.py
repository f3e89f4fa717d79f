"""Loss aggregation: how a per-token loss (N, T) becomes one scalar (docs/methods.md §0.2, §2.18).

| mode                     | scalar                                              |
|--------------------------|-----------------------------------------------------|
| token-mean               | Σ_it m·ℓ / Σ_it m                                   |
| seq-mean-token-mean      | (1/S) Σ_i (Σ_t m·ℓ / L_i)          (GRPO)            |
| seq-mean-token-sum       | (1/S) Σ_i Σ_t m·ℓ                  (BPCO)            |
| seq-mean-token-sum-norm  | (1/S) Σ_i Σ_t m·ℓ / C, C constant  (Dr. GRPO)        |
| length-power             | (1/S) Σ_i L_i^(α−1) Σ_t m·ℓ / C_α  (Ding et al.)     |

``L_i`` = trained tokens of row i, ``S`` = rows with at least one trained token. Every mode is a
sum of per-row terms over *global* normalisers (``num_tokens``, ``num_seqs``, ``horizon``), so a
batch split into micro-batches or data-parallel shards gives the same gradient when each part is
aggregated with the global normalisers and the parts are summed (or averaged over ranks with
``dp_size``). When the normalisers are omitted they are taken from the given batch.

The constant C is ``norm`` when set, else ``horizon`` (C_α = horizon**α): the trainer passes the
configured completion cap ``rollout.max_new_tokens`` (TRL's ``max_completion_length``, verl's
response length), the same on every rank and step. Only a caller that passes no horizon gets the
padded width ``T`` of the given tensor, which changes with the batch's longest completion.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.ops import masked_sum
from rlvr.registry import param
from rlvr.types import BatchError, check_mask, check_shape

AGGREGATION_MODES = (
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "length-power",
)


@dataclass(frozen=True)
class Aggregation:
    """How the per-token loss is reduced to a scalar."""

    mode: str = param("seq-mean-token-mean", f"one of {', '.join(AGGREGATION_MODES)}")
    norm: float | None = param(None, "constant C for seq-mean-token-sum-norm (default: the completion cap "
                                     "rollout.max_new_tokens) and length-power (default: cap**alpha)")
    alpha: float = param(0.0, "length-power exponent: token weight L**(alpha-1); 0 = GRPO, 1 = Dr. GRPO")

    def __post_init__(self) -> None:
        if self.mode not in AGGREGATION_MODES:
            raise ValueError(f"unknown aggregation mode '{self.mode}'; valid: {', '.join(AGGREGATION_MODES)}")

    def __call__(self, per_token: Tensor, mask: Tensor, **normalisers: float | Tensor | None) -> Tensor:
        return aggregate(per_token, mask, self.mode, norm=self.norm, alpha=self.alpha, **normalisers)


def global_normalisers(mask: Tensor) -> dict[str, Tensor]:
    """The normalisers of a whole (global) batch: trained tokens and rows with any trained token."""
    return {"num_tokens": mask.sum(), "num_seqs": (mask.sum(-1) > 0).sum()}


def token_weights(mask: Tensor, mode: str, *, num_tokens: float | Tensor | None = None,
                  num_seqs: float | Tensor | None = None, norm: float | None = None,
                  alpha: float = 0.0, horizon: float | None = None) -> Tensor:
    """(N, T) weight w with ``aggregate(ℓ) = Σ w·ℓ``: the gradient weight each token gets.
    ``horizon`` is the length constant when ``norm`` is unset (default: the padded width T)."""
    check_mask(mask, "mask")
    m = mask.float()
    lengths = m.sum(-1, keepdim=True)  # (N, 1)
    if mode == "token-mean":
        denom = mask.sum() if num_tokens is None else num_tokens
        return m / torch.as_tensor(denom, dtype=m.dtype).clamp(min=1)
    seqs = (lengths > 0).sum() if num_seqs is None else num_seqs
    seqs = torch.as_tensor(seqs, dtype=m.dtype).clamp(min=1)
    horizon = float(mask.shape[-1] if horizon is None else horizon)
    if mode == "seq-mean-token-mean":
        per_row = 1.0 / lengths.clamp(min=1)
    elif mode == "seq-mean-token-sum":
        per_row = torch.ones_like(lengths)
    elif mode == "seq-mean-token-sum-norm":
        per_row = torch.ones_like(lengths) / (horizon if norm is None else norm)
    elif mode == "length-power":
        const = horizon ** alpha if norm is None else norm
        per_row = lengths.clamp(min=1) ** (alpha - 1.0) / const
    else:
        raise ValueError(f"unknown aggregation mode '{mode}'; valid: {', '.join(AGGREGATION_MODES)}")
    return m * per_row / seqs


def aggregate(per_token: Tensor, mask: Tensor, mode: str, *, num_tokens: float | Tensor | None = None,
              num_seqs: float | Tensor | None = None, norm: float | None = None, alpha: float = 0.0,
              horizon: float | None = None, dp_size: int = 1) -> Tensor:
    """Reduce a per-token loss (N, T) to a scalar (see the module table).

    ``dp_size`` multiplies the result so that averaging gradients over data-parallel ranks (as DDP
    does) yields the gradient of the global aggregate; pass the global normalisers with it.
    """
    check_shape(per_token, tuple(mask.shape), "per_token")
    if dp_size > 1 and (num_tokens is None if mode == "token-mean" else num_seqs is None):
        raise BatchError(f"aggregate: dp_size={dp_size} needs the global normaliser for mode '{mode}'")
    w = token_weights(mask, mode, num_tokens=num_tokens, num_seqs=num_seqs, norm=norm, alpha=alpha,
                      horizon=horizon)
    return masked_sum(per_token * w.to(per_token.dtype), mask) * dp_size
