"""Medusa-style future-token heads for SpecRoll: K small heads on the policy's last hidden state.

Head k (k = 1..K) reads the hidden state ``h_t`` that produces the policy's own next-token logits
(token t+1) and guesses token t+1+k:

    ``logits_k(h) = W_k · (h + SiLU(A_k h + b_k))``

``W_k`` starts as a copy of the policy's output layer and ``A_k``, ``b_k`` at zero (Medusa's
initialisation), so an untrained head repeats the policy's next-token guess. The heads never
touch the policy: they only propose tokens, which the policy then verifies exactly.

The slow path (:func:`fit_heads`) trains them with cross-entropy on the policy's own hidden states
and the tokens that followed, no gradient through the policy.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class DraftHeads(nn.Module):
    """K future-token heads over a hidden size H and a vocabulary V.

    Shapes: hidden (B, H) → logits (B, K, V).
    """

    def __init__(self, hidden: int, vocab: int, num_heads: int, output_weight: Tensor | None = None) -> None:
        super().__init__()
        if num_heads < 1:
            raise ValueError(f"DraftHeads: num_heads must be >= 1, got {num_heads}")
        self.num_heads = num_heads
        self.res_weight = nn.Parameter(torch.zeros(num_heads, hidden, hidden))  # (K, H, H) A_k
        self.res_bias = nn.Parameter(torch.zeros(num_heads, hidden))  # (K, H) b_k
        out = torch.randn(num_heads, vocab, hidden) * hidden ** -0.5  # (K, V, H) W_k
        if output_weight is not None:
            out = output_weight.detach().float().to(out.device).unsqueeze(0).repeat(num_heads, 1, 1).clone()
        self.out_weight = nn.Parameter(out)

    def forward(self, hidden: Tensor) -> Tensor:
        """(B, H) → (B, K, V) draft logits."""
        h = hidden.float()  # (B, H)
        res = torch.nn.functional.silu(torch.einsum("bh,kgh->bkg", h, self.res_weight) + self.res_bias)  # (B, K, H)
        return torch.einsum("bkh,kvh->bkv", h.unsqueeze(1) + res, self.out_weight)  # (B, K, V)

    def forward_all(self, hidden: Tensor) -> Tensor:
        """(N, S, H) → (N, S, K, V): every position at once, for training."""
        n, s, h = hidden.shape
        return self.forward(hidden.reshape(n * s, h)).reshape(n, s, self.num_heads, -1)

    def token_embeddings(self, head: Tensor, tokens: Tensor) -> Tensor:
        """(B, H) row ``tokens[b]`` of head ``head[b]``'s output layer: the direction in hidden space
        that raises that token's draft logit (Reflex moves the hidden state along it)."""
        return self.out_weight[head, tokens]  # (B, H)


def output_layer_weight(model: nn.Module) -> Tensor | None:
    """(V, H) weight of the policy's output layer (``get_output_embeddings``), if it has one."""
    getter = getattr(model, "get_output_embeddings", None)
    layer = getter() if getter is not None else None
    return None if layer is None else layer.weight


def fit_heads(heads: DraftHeads, hidden: Tensor, tokens: Tensor, target_mask: Tensor, *, steps: int,
              lr: float, batch_positions: int, seed: int) -> float:
    """Cross-entropy fit of the heads on the policy's hidden states; returns the last loss.

    ``hidden`` (N, S, H): the policy's last hidden state at every position; ``tokens`` (N, S) the
    sequence; ``target_mask`` (N, S) bool, True where a token may serve as a target. Head k at
    position t is trained to predict ``tokens[t + 1 + k]`` wherever that token is a target; each
    step samples ``batch_positions`` positions and trains every head on each of them.
    """
    targets, valid = future_targets(tokens, target_mask, heads.num_heads)  # (N, S, K) each
    positions = valid.any(-1).nonzero().cpu()  # (M, 2): (row, t) with at least one target
    if positions.shape[0] == 0:
        return float("nan")
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    opt = torch.optim.Adam(heads.parameters(), lr=lr)
    loss_value = float("nan")
    with torch.enable_grad():
        for _ in range(steps):
            pick = torch.randint(0, positions.shape[0], (min(batch_positions, positions.shape[0]),), generator=gen)
            row, pos = positions[pick].to(hidden.device).unbind(-1)  # (M',) each
            logits = heads(hidden[row, pos])  # (M', K, V)
            labels = targets[row, pos].masked_fill(~valid[row, pos], -100)  # (M', K), -100 = no target
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_value = float(loss.detach())
    return loss_value


def future_targets(tokens: Tensor, target_mask: Tensor, k_heads: int) -> tuple[Tensor, Tensor]:
    """(N, S, K) token ``tokens[t + 1 + k]`` (k = 1..K) at every position t, and whether it exists
    and is a target."""
    n, s = tokens.shape
    targets = torch.zeros((n, s, k_heads), dtype=torch.long, device=tokens.device)
    valid = torch.zeros((n, s, k_heads), dtype=torch.bool, device=tokens.device)
    for k in range(k_heads):  # head index k (0-based) predicts offset k + 2: head 1 → t + 2
        offset = k + 2
        if offset < s:
            targets[:, :s - offset, k] = tokens[:, offset:]
            valid[:, :s - offset, k] = target_mask[:, offset:]
    return targets, valid
