"""Model merging of task vectors: DARE (drop and rescale) and TIES (trim, elect sign, disjoint merge).

A task vector is a weight delta ``Δ_k = θ_k − θ_0`` of one fine-tune. Everything here is plain
tensor math on one tensor (or a ``(K, ...)`` stack of K deltas of that tensor); ``LayerwiseMerge``
applies it per layer and precomputes the kept pieces once, so that ``θ(c)`` for many coefficient
vectors ``c`` (the CMA-ES population of Hyper-ES) costs one multiply-add per direction.

* DARE (Yu et al., "Language Models are Super Mario", arXiv:2311.03099):
  ``Δ̃ = (M ⊙ Δ)/(1 − p)``, ``M ∼ Bernoulli(1 − p)`` — unbiased, ``E[Δ̃] = Δ``.
* TIES (Yadav et al., "TIES-Merging", arXiv:2306.01708): trim each delta to its top-ρ fraction of
  entries by magnitude, elect ``σ = sign(Σ_k Δ̂_k)`` per entry, keep the entries that agree with σ,
  and (for one shared coefficient) average the kept entries over the directions that kept them.
"""

from __future__ import annotations

import math
import re

import torch
from torch import Tensor

GRANULARITIES = ("layer_direction", "direction", "layer")


def dare(delta: Tensor, drop_p: float, generator: torch.Generator | None = None) -> Tensor:
    """Drop each entry with probability ``drop_p`` and rescale the rest by ``1/(1 − drop_p)``.

    ``drop_p = 0`` returns an exact copy (no random numbers are drawn)."""
    if not 0.0 <= drop_p < 1.0:
        raise ValueError(f"dare: drop_p must be in [0, 1), got {drop_p}")
    if drop_p == 0.0:
        return delta.clone()
    keep = torch.rand(delta.shape, generator=generator, dtype=torch.float64) >= drop_p  # Bernoulli(1 − p)
    return torch.where(keep.to(delta.device), delta / (1.0 - drop_p), torch.zeros_like(delta))


def trim_top(delta: Tensor, keep_rho: float) -> Tensor:
    """Keep the ``ceil(ρ·numel)`` entries of largest magnitude (at least one), zero the rest.

    ``keep_rho = 1`` returns an exact copy."""
    if not 0.0 < keep_rho <= 1.0:
        raise ValueError(f"ties: keep_rho must be in (0, 1], got {keep_rho}")
    if keep_rho == 1.0 or delta.numel() == 0:
        return delta.clone()
    k = max(1, math.ceil(keep_rho * delta.numel()))
    flat = delta.flatten()
    keep = torch.zeros(flat.shape, dtype=torch.bool, device=delta.device)
    keep[flat.abs().topk(k).indices] = True  # exactly k entries, even with ties in magnitude
    return torch.where(keep, flat, torch.zeros_like(flat)).view_as(delta)


def elect_sign(trimmed: Tensor) -> Tensor:
    """``σ = sign(Σ_k Δ̂_k)`` per entry of a ``(K, ...)`` stack (TIES "mass" election); 0 where the
    sum is exactly 0, and such entries keep nothing."""
    return torch.sign(trimmed.sum(0))


def agreeing(trimmed: Tensor, sign: Tensor) -> Tensor:
    """``(K, ...)`` bool: entry of direction k is non-zero and has the elected sign."""
    return (torch.sign(trimmed) == sign.unsqueeze(0)) & (trimmed != 0)


def ties_kept(deltas: Tensor, keep_rho: float) -> Tensor:
    """``(K, ...)`` → ``(K, ...)``: each delta trimmed, with the entries that disagree with the elected
    sign zeroed (``TIESkeep(Δ̂_k)`` of docs/methods.md §2.10)."""
    trimmed = torch.stack([trim_top(d, keep_rho) for d in deltas])  # (K, ...)
    keep = agreeing(trimmed, elect_sign(trimmed))
    return torch.where(keep, trimmed, torch.zeros_like(trimmed))


def disjoint_mean(kept: Tensor) -> Tensor:
    """``(K, ...)`` → ``(...)``: per entry, the mean over the directions that kept it (0 if none)."""
    count = (kept != 0).sum(0).clamp(min=1)
    return kept.sum(0) / count


def ties_merge(deltas: Tensor, keep_rho: float) -> Tensor:
    """Classic TIES merge of a ``(K, ...)`` stack: trim, elect, disjoint mean → ``(...)``."""
    return disjoint_mean(ties_kept(deltas, keep_rho))


def layer_key(name: str) -> str:
    """The layer a parameter belongs to: ``"layers.<i>"`` for decoder blocks, else the name itself."""
    match = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
    return f"layers.{match.group(1)}" if match else name


class LayerwiseMerge:
    """``θ(c) = θ_0 + Σ_l Σ_k c_{l,k} · TIESkeep_l(DARE(Δ_{k,l}))`` for a fixed base and fixed deltas.

    ``base``: name → θ_0 tensor (only the tensors some delta changes); ``deltas``: K dicts name → Δ_k.
    DARE masks are drawn once (seeded), so θ(c) is a deterministic function of c. Kept pieces are
    stored in float64 so that ``c = e_k`` with ``drop_p = 0``, ``keep_rho = 1``, K = 1 gives back
    ``θ_0 + Δ_1`` exactly. ``granularity``: ``layer_direction`` (c ∈ R^{L×K}), ``direction``
    (c ∈ R^K shared by all layers) or ``layer`` (c ∈ R^L times the disjoint mean of the K kept pieces).
    """

    def __init__(self, base: dict[str, Tensor], deltas: list[dict[str, Tensor]], *, drop_p: float,
                 keep_rho: float, granularity: str = "layer_direction", seed: int = 0) -> None:
        if granularity not in GRANULARITIES:
            raise ValueError(f"merge: granularity must be one of {GRANULARITIES}, got '{granularity}'")
        if not deltas:
            raise ValueError("merge: at least one direction is needed")
        self.granularity, self.num_directions = granularity, len(deltas)
        self.base = {k: v.detach().clone() for k, v in base.items()}
        self.layers = sorted({layer_key(n) for n in self.base}, key=_natural)
        gen = torch.Generator().manual_seed(seed)
        self.pieces: dict[str, Tensor] = {}  # name -> (K, ...) float64, or (...) for 'layer'
        for name in sorted(self.base):
            stack = torch.stack([dare(d[name].detach().double(), drop_p, gen) for d in deltas])  # (K, ...)
            kept = ties_kept(stack, keep_rho)
            self.pieces[name] = disjoint_mean(kept) if granularity == "layer" else kept

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the coefficient array c."""
        n_l, n_k = len(self.layers), self.num_directions
        return {"layer_direction": (n_l, n_k), "direction": (n_k,), "layer": (n_l,)}[self.granularity]

    @property
    def num_coefficients(self) -> int:
        return math.prod(self.shape)

    def weights(self, coefs: Tensor | list[float]) -> dict[str, Tensor]:
        """θ(c) for every merged tensor (dtype of the base)."""
        c = torch.as_tensor(coefs, dtype=torch.float64).reshape(self.shape)
        out = {}
        for name, piece in self.pieces.items():
            c = c.to(piece.device)
            layer = self.layers.index(layer_key(name))
            if self.granularity == "layer":
                delta = c[layer] * piece
            else:
                ck = c[layer] if self.granularity == "layer_direction" else c  # (K,)
                delta = torch.tensordot(ck, piece, dims=1)  # Σ_k c_k piece_k
            base = self.base[name]
            out[name] = (base.double() + delta).to(base.dtype)
        return out

    @torch.no_grad()
    def apply(self, model: torch.nn.Module, coefs: Tensor | list[float]) -> None:
        """Write θ(c) into ``model``'s parameters in place."""
        params = dict(model.named_parameters())
        for name, value in self.weights(coefs).items():
            params[name].copy_(value)


def _natural(key: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key))
