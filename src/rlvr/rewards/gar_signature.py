"""GAR's gradient signature of a token sequence, from the output layer's inputs only (docs/methods.md §2.1).

For a span of T' response tokens y_t with output-layer inputs h_t (h_t predicts y_t), the mean
cross-entropy ``L = Σ_t CE(W h_t + b, y_t) / T'`` has, per row, the gradient

    g_t = ∂L/∂h_t = Wᵀ (softmax(W h_t + b) − e_{y_t}) / T'                              (H,)

(truncated backpropagation: through the output projection only). The signature is the
gradient × activation saliency ``S = Σ_t (g_t ⊙ h_t) / T'`` (H,), L2-normalised when ‖S‖ > 1e-8,
exactly as the reference code (LQgdwind/GAR @7c1dce8 ``_compute_gradient_vector``).

Memory: tokens go through the output layer in chunks of ``chunk_tokens`` rows, so the peak is a
(chunk, V) logit block — never a V × H matrix per token, and never (T', V) for a long response.
"""

from __future__ import annotations

import torch
from torch import Tensor

NORM_EPS = 1e-8  # the reference code's threshold below which S is left unnormalised


def hidden_gradient(hidden: Tensor, targets: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """(T, H) ∂(mean CE)/∂h = Wᵀ(softmax(W h + b) − onehot(y)) / T, in closed form (no autograd).

    ``hidden`` (T, H), ``targets`` (T,) long, ``weight`` (V, H), ``bias`` (V,) or None.
    """
    logits = hidden.float() @ weight.float().T  # (T, V)
    if bias is not None:
        logits = logits + bias.float()
    err = torch.softmax(logits, dim=-1)  # (T, V) prediction error p − e_y after the next line
    err[torch.arange(targets.shape[0], device=err.device), targets] -= 1.0
    return err @ weight.float() / max(int(targets.shape[0]), 1)  # (T, H)


def saliency_signatures(hidden: Tensor, targets: Tensor, row: Tensor, lengths: Tensor, weight: Tensor,
                        bias: Tensor | None = None, chunk_tokens: int = 1024, normalise: bool = True) -> Tensor:
    """(R, H) GAR signatures of R token spans packed into one list of M tokens.

    ``hidden`` (M, H) output-layer inputs, ``targets`` (M,) the tokens they predict, ``row`` (M,)
    long the span each token belongs to, ``lengths`` (R,) the token count T'_r of each span.
    ``S_r = Σ_{t∈r} (g_t ⊙ h_t) / T'_r`` with ``g_t = Wᵀ(p_t − e_{y_t}) / T'_r``; unit norm when
    ``normalise`` and ‖S_r‖ > 1e-8. A span of length 0 gets a zero signature.
    """
    n_rows, h_dim = int(lengths.shape[0]), int(hidden.shape[-1])
    out = torch.zeros((n_rows, h_dim), dtype=torch.float32, device=hidden.device)  # (R, H)
    w = weight.float()
    inv_len = 1.0 / lengths.clamp(min=1).float().to(hidden.device)  # (R,)
    for lo in range(0, int(targets.shape[0]), max(int(chunk_tokens), 1)):
        h = hidden[lo:lo + chunk_tokens].float()  # (c, H)
        y, r = targets[lo:lo + chunk_tokens], row[lo:lo + chunk_tokens]
        logits = h @ w.T  # (c, V): the only V-sized block held at once
        if bias is not None:
            logits = logits + bias.float()
        err = torch.softmax(logits, dim=-1)
        err[torch.arange(y.shape[0], device=err.device), y] -= 1.0
        grad = (err @ w) * inv_len[r, None]  # (c, H) g_t
        out.index_add_(0, r, grad * h * inv_len[r, None])  # Σ_t g_t ⊙ h_t / T'
    if normalise:
        norm = out.norm(dim=-1, keepdim=True)  # (R, 1)
        out = torch.where(norm > NORM_EPS, out / norm.clamp(min=NORM_EPS), out)
    return out


def pack_spans(hidden_rows: list[Tensor], target_rows: list[Tensor], max_tokens: int) -> tuple[Tensor, ...]:
    """Pack per-span (T_r, H) hidden states and (T_r,) targets into (M, H), (M,), row (M,), lengths (R,),
    keeping only the **last** ``max_tokens`` tokens of each span (``max_tokens <= 0``: all)."""
    hs, ys, rows, lengths = [], [], [], []
    for r, (h, y) in enumerate(zip(hidden_rows, target_rows)):
        if max_tokens > 0 and y.shape[0] > max_tokens:
            h, y = h[-max_tokens:], y[-max_tokens:]
        hs.append(h)
        ys.append(y)
        rows.append(torch.full((y.shape[0],), r, dtype=torch.long, device=y.device))
        lengths.append(int(y.shape[0]))
    device = target_rows[0].device if target_rows else torch.device("cpu")
    return (torch.cat(hs) if hs else torch.zeros((0, 0)), torch.cat(ys) if ys else torch.zeros(0, dtype=torch.long),
            torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long),
            torch.tensor(lengths, dtype=torch.long, device=device))


@torch.no_grad()
def output_layer_inputs(model: torch.nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                        completion_mask: Tensor) -> Tensor:
    """(N, T, H) float32 teacher-forced output-layer inputs: row t predicts completion token t.

    One forward with a hook on ``model.get_output_embeddings()``, positions as at generation time
    (left padding, real tokens count from 0), so it matches the states captured while decoding.
    """
    head = model.get_output_embeddings()
    captured: list[Tensor] = []
    handle = head.register_forward_hook(lambda _m, inputs, _out: captured.append(inputs[0]))
    ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (N, P + T)
    mask = torch.cat([prompt_mask, completion_mask], dim=1).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    t = completion_ids.shape[1]
    was_training = model.training
    model.eval()
    try:
        model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=t + 1)
    finally:
        handle.remove()
        model.train(was_training)
    return captured[-1][:, -(t + 1):-1].float()  # (N, T, H): position P-1+t predicts token t
