"""GAR's signal taken apart: prediction error × activation at the output layer (docs/methods.md §2.1).

For a response with output-layer inputs ``h_t`` (T, H) and tokens ``y_t``, the mean cross-entropy
``L = Σ_t CE(W h_t, y_t)/T`` has

* prediction error ``δ_t = softmax(W h_t) − e_{y_t}`` (V,) — what the model got wrong at token t;
* back-projected error ``g_t = ∂L/∂h_t = Wᵀ δ_t / T`` (H,);
* GAR's saliency ``S = Σ_t g_t ⊙ h_t / T`` (H,): per hidden unit, error signal times activation —
  the abstract's "multiplicative decomposition"; ``contribution[t] = g_t ⊙ h_t / T`` sums to S;
* the output-projection gradient ``∂L/∂W = Σ_t δ_t h_tᵀ / T`` (V, H), a rank-≤T matrix. Two of them
  compare without ever forming one: ``⟨G_a, G_b⟩ = Σ_{s,t} (δ_s·δ'_t)(h_s·h'_t)/(T T')``.

Everything here is closed form (no autograd) and for diagnostics; the reward lives in
``rlvr.rewards.gar``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.rewards.gar_signature import hidden_gradient


@dataclass
class GARDecomposition:
    """One response's GAR signal, token by token."""

    activation: Tensor  # (T, H) h_t
    gradient: Tensor  # (T, H) g_t = Wᵀ(p_t − e_{y_t}) / T
    contribution: Tensor  # (T, H) g_t ⊙ h_t / T; sums over t to the saliency
    saliency: Tensor  # (H,) S (unnormalised)
    error_norm: Tensor  # (T,) ‖p_t − e_{y_t}‖₂, the size of each token's prediction error
    token_alignment: Tensor  # (T,) contribution[t] · S/‖S‖: how much token t pushes S along its direction


def prediction_error(hidden: Tensor, targets: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """(T, V) ``softmax(W h_t + b) − onehot(y_t)`` (holds a (T, V) block: short spans only)."""
    logits = hidden.float() @ weight.float().T
    if bias is not None:
        logits = logits + bias.float()
    err = torch.softmax(logits, dim=-1)
    err[torch.arange(targets.shape[0], device=err.device), targets] -= 1.0
    return err


def decompose(hidden: Tensor, targets: Tensor, weight: Tensor, bias: Tensor | None = None) -> GARDecomposition:
    """The prediction-error × activation decomposition of one response (``hidden`` (T, H), ``targets`` (T,))."""
    t = max(int(targets.shape[0]), 1)
    h = hidden.float()
    g = hidden_gradient(h, targets, weight, bias)  # (T, H)
    contribution = g * h / t  # (T, H)
    saliency = contribution.sum(0)  # (H,)
    unit = saliency / saliency.norm().clamp(min=1e-8)
    err = prediction_error(h, targets, weight, bias).norm(dim=-1)  # (T,)
    return GARDecomposition(h, g, contribution, saliency, err, contribution @ unit)


def weight_gradient(hidden: Tensor, targets: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """(V, H) ∂(mean CE)/∂W = Σ_t (p_t − e_{y_t}) h_tᵀ / T, one V × H matrix (never one per token)."""
    err = prediction_error(hidden, targets, weight, bias)  # (T, V)
    return err.T @ hidden.float() / max(int(targets.shape[0]), 1)


def weight_gradient_inner(h_a: Tensor, y_a: Tensor, h_b: Tensor, y_b: Tensor, weight: Tensor,
                          bias: Tensor | None = None, chunk_tokens: int = 256) -> Tensor:
    """Scalar ⟨∂L_a/∂W, ∂L_b/∂W⟩_F = Σ_{s,t} (δ_s·δ'_t)(h_s·h'_t)/(T_a T_b) by Gram products, in
    chunks of ``chunk_tokens`` tokens of ``a`` (peak memory: (chunk, V) and (chunk, T_b))."""
    err_b = prediction_error(h_b, y_b, weight, bias)  # (T_b, V)
    total = torch.zeros((), dtype=torch.float32, device=h_a.device)
    for lo in range(0, int(y_a.shape[0]), max(chunk_tokens, 1)):
        err_a = prediction_error(h_a[lo:lo + chunk_tokens], y_a[lo:lo + chunk_tokens], weight, bias)  # (c, V)
        total = total + ((err_a @ err_b.T) * (h_a[lo:lo + chunk_tokens].float() @ h_b.float().T)).sum()
    return total / (max(int(y_a.shape[0]), 1) * max(int(y_b.shape[0]), 1))


def weight_gradient_cosine(h_a: Tensor, y_a: Tensor, h_b: Tensor, y_b: Tensor, weight: Tensor,
                           bias: Tensor | None = None) -> float:
    """Cosine of two output-projection gradients, from Gram products only."""
    ab = weight_gradient_inner(h_a, y_a, h_b, y_b, weight, bias)
    aa = weight_gradient_inner(h_a, y_a, h_a, y_a, weight, bias)
    bb = weight_gradient_inner(h_b, y_b, h_b, y_b, weight, bias)
    return float(ab / (aa.sqrt() * bb.sqrt()).clamp(min=1e-12))
