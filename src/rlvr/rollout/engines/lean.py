"""A lean decode forward for Llama-architecture models (Llama, Qwen2) that the ``loop`` engine uses.

transformers' forward builds a 4-D mask, walks a cache object and passes through several wrapper
layers on every call; for the small models of this testbed that machinery costs more than the
arithmetic of a decode step. :class:`LeanDecoder` computes the same decoder with the model's own
weights and rotary embedding, straight tensor calls (under autocast the layers' weights cast once per
call instead of at every matmul; on small or cast models q/k/v and gate/up each as one matmul over the
weights joined), a preallocated KV cache, and a decode step's attention (one query)
as two small batched products (CPU's fused sdpa kernel is ~5x slower at one query: 7 vs 1.4 ms a call
for SmolLM2's 9 heads over 3 key/value heads, 64 rows). On the models it accepts, its logits equal
the model's forward within float rounding (the same products and sums;
tests/unit/rollout/test_lean_decoder.py checks Llama and Qwen2 with left padding, grouped-query heads,
dropped rows and bf16 autocast). Anything else — another architecture, a sliding window,
an attention implementation other than sdpa or eager, a wrapped linear (LoRA, quantised), hooks on
the decoder (sharded parameters) — is refused with the reason, and the engine uses the model's
forward (``lean_refusal``).

Shapes: prompt ids / mask / positions (B, P) → logits (B, V); one step: tokens (B,), key mask
(B, K) with K = P + steps so far, positions (B, 1) → logits (B, V). KV cache (layers, B, H_kv, P + T, D).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlvr.models.rowwise_attention import ROWWISE_SDPA, has_sliding_window

_ARCHS = {"llama", "qwen2"}
JOIN_MAX_BYTES = 64 << 20  # decoder layers up to this size get joined q/k/v and gate/up matmuls
CAST_MAX_BYTES = 1 << 30  # under autocast, decoder layers up to this size (cast) are held cast for the call
_LAYER = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}
_ATTN = {"q_proj", "k_proj", "v_proj", "o_proj"}
_MLP = {"gate_proj", "up_proj", "down_proj", "act_fn"}


def lean_refusal(model: nn.Module) -> str | None:
    """Why :class:`LeanDecoder` cannot run ``model`` exactly (None: it can)."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "model_type", None) not in _ARCHS:
        return f"model type {getattr(cfg, 'model_type', None)!r} is not one of {sorted(_ARCHS)}"
    if getattr(cfg, "_attn_implementation", None) not in ("sdpa", "eager", ROWWISE_SDPA):
        return f"attention implementation {getattr(cfg, '_attn_implementation', None)!r}"
    if has_sliding_window(cfg):
        return "sliding-window attention"
    if (getattr(cfg, "pretraining_tp", 1) or 1) != 1:
        return "pretraining_tp > 1"
    if model.training and getattr(cfg, "attention_dropout", 0.0):
        return "attention dropout in training mode"
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or getattr(model, "lm_head", None) is None:
        return "no model.layers / lm_head"
    for layer in layers:
        if set(dict(layer.named_children())) != _LAYER or set(dict(layer.self_attn.named_children())) != _ATTN \
                or set(dict(layer.mlp.named_children())) != _MLP:
            return "a decoder layer with other parts than Llama's"
        linears = [*layer.self_attn.children(), layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj]
        if any(type(lin) is not nn.Linear for lin in linears):
            return "a wrapped linear layer (LoRA, quantised)"
    norms = [getattr(inner, "norm", None)]  # the final norm, then each layer's two
    norms += [norm for layer in layers for norm in (layer.input_layernorm, layer.post_attention_layernorm)]
    if any(not type(norm).__name__.endswith("RMSNorm") or not hasattr(norm, "variance_epsilon") for norm in norms):
        return "a norm other than RMSNorm"
    if any(m._forward_hooks or m._forward_pre_hooks for m in inner.modules()):
        return "hooks on the decoder (sharded or instrumented parameters)"
    if any(type(p) is not nn.Parameter and type(p) is not Tensor for p in inner.parameters()):
        return "parameters that are not plain tensors (sharded)"
    return None


def _rms(x: Tensor, norm: nn.Module) -> Tensor:
    """Llama's / Qwen2's RMSNorm, the same operations in the same order."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(dtype)


def _joined(dtype: torch.dtype | None, *linears: nn.Linear) -> tuple[Tensor, Tensor | None]:
    """The weight and bias of ``linears`` applied side by side (outputs concatenated in that order),
    cast to ``dtype`` (None: kept as they are)."""
    weight = torch.cat([m.weight.to(dtype) for m in linears])  # (sum out, in)
    biases = [m.bias for m in linears]
    if all(b is None for b in biases):
        return weight, None
    return weight, torch.cat([b.to(dtype) if b is not None else weight.new_zeros(m.out_features)
                              for m, b in zip(linears, biases, strict=True)])


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding of (B, H, S, D) with cos / sin (B, 1, S, D), rotate-half convention."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _one_query_attention(q: Tensor, keys: Tensor, values: Tensor, mask: Tensor, scale: float) -> Tensor:
    """softmax(q kᵀ · scale) v for one query position: q (B, H, 1, D), keys / values (B, H_kv, K, D), mask
    (B, 1, 1, K) True on real keys → (B, H, 1, D). Query head h reads key/value head h // (H / H_kv), as
    transformers' ``repeat_kv`` lays them out, so the heads sharing one key/value head are one small
    (H / H_kv, D) × (D, K) product. Scores and softmax in float32, the weights cast back to the values'
    dtype for the second product (sdpa's order of operations; its reduction blocking differs)."""
    b, h, _, d = q.shape
    kv, k = keys.shape[1], keys.shape[2]
    grouped = q.reshape(b, kv, h // kv, d)  # (B, H_kv, H / H_kv, D)
    scores = torch.matmul(grouped, keys.transpose(-1, -2)).float() * scale  # (B, H_kv, H / H_kv, K)
    scores = scores.masked_fill(~mask.view(b, 1, 1, k), float("-inf"))
    weights = torch.softmax(scores, dim=-1).to(values.dtype)
    return torch.matmul(weights, values).reshape(b, h, 1, d)  # (B, H, 1, D)


class LeanDecoder:
    """Prefill then one token per step over a preallocated KV cache; ``select`` drops finished rows.

    ``model``: a model ``lean_refusal`` accepts; ``max_len``: prompt length + max new tokens.
    Call under ``torch.no_grad()`` (it is a sampling path)."""

    def __init__(self, model: nn.Module, max_len: int) -> None:
        self.model, self.inner, self.max_len = model, model.model, max_len
        self.layers = list(self.inner.layers)
        # One decoder serves one generation call, so the weights are fixed while it lives. Under autocast,
        # the layers' weights are cast once here instead of at every matmul of every step (the same
        # rounding autocast applies, so the same products); on small models, or where that cast copy
        # is held anyway, q/k/v and gate/up also become one matmul each (fewer calls where per-call
        # overhead dominates). Large float32 models keep separate matmuls rather than hold a copy.
        first = next(self.inner.layers.parameters())
        dtype = torch.get_autocast_dtype(first.device.type) if torch.is_autocast_enabled(first.device.type) else None
        size = sum(p.numel() for p in self.inner.layers.parameters())
        cast = dtype is not None and first.dtype != dtype and size * dtype.itemsize <= CAST_MAX_BYTES
        join = cast or size * first.element_size() <= JOIN_MAX_BYTES
        self.dtype = dtype if cast else None
        self.qkv = [_joined(self.dtype, a.q_proj, a.k_proj, a.v_proj) if join else None
                    for a in (layer.self_attn for layer in self.layers)]
        self.gate_up = [_joined(self.dtype, layer.mlp.gate_proj, layer.mlp.up_proj) if join else None
                        for layer in self.layers]
        self.out = [(_joined(self.dtype, layer.self_attn.o_proj), _joined(self.dtype, layer.mlp.down_proj))
                    if cast else None for layer in self.layers]
        self.keys: Tensor | None = None  # (L, B, H_kv, max_len, D), allocated at prefill (the K/V dtype)
        self.values: Tensor | None = None
        self.length = 0  # positions filled

    def prefill(self, ids: Tensor, mask: Tensor, pos: Tensor) -> Tensor:
        """Logits (B, V) after left-padded prompts ``ids`` / ``mask`` (B, P) at positions ``pos`` (B, P)."""
        p = ids.shape[1]
        causal = torch.ones(p, p, dtype=torch.bool, device=ids.device).tril()  # (P, P)
        keys = causal[None] & mask[:, None, :]  # (B, P, P) a query sees earlier real tokens
        keys |= torch.eye(p, dtype=torch.bool, device=ids.device)[None]  # a padding query sees itself (no NaN)
        return self._forward(ids, pos, keys[:, None])

    def step(self, token: Tensor, key_mask: Tensor, pos: Tensor) -> Tensor:
        """Logits (B, V) after ``token`` (B,) at ``pos`` (B, 1); ``key_mask`` (B, K) True on real keys,
        K = the positions filled after this step."""
        return self._forward(token[:, None], pos, key_mask.bool()[:, None, None, :])

    def select(self, keep: Tensor) -> None:
        """Keep only rows ``keep`` (B',) of the cache."""
        self.keys, self.values = self.keys[:, keep], self.values[:, keep]

    def _forward(self, ids: Tensor, pos: Tensor, mask: Tensor) -> Tensor:
        """ids / pos (B, S), mask (B, 1, S, K) bool → logits of the last position (B, V)."""
        x = F.embedding(ids, self.inner.embed_tokens.weight)  # (B, S, H)
        cos, sin = self.inner.rotary_emb(x, pos)  # (B, S, D)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, S, D)
        b, s = ids.shape
        start, end = self.length, self.length + s
        for i, layer in enumerate(self.layers):
            x = x + self._attention(i, layer.self_attn, _rms(x, layer.input_layernorm), cos, sin, mask, start, end)
            h = _rms(x, layer.post_attention_layernorm)
            mlp = layer.mlp
            if self.gate_up[i] is not None:
                gate, up = F.linear(h, *self.gate_up[i]).chunk(2, dim=-1)  # (B, S, I) each
            else:
                gate, up = (F.linear(h, m.weight, m.bias) for m in (mlp.gate_proj, mlp.up_proj))
            down = self.out[i][1] if self.out[i] is not None else (mlp.down_proj.weight, mlp.down_proj.bias)
            x = x + F.linear(mlp.act_fn(gate) * up, *down)
        self.length = end
        return self.model.lm_head(_rms(x[:, -1:], self.inner.norm))[:, -1]  # a module call: its hooks fire

    def _attention(self, i: int, attn: nn.Module, h: Tensor, cos: Tensor, sin: Tensor, mask: Tensor,
                   start: int, end: int) -> Tensor:
        b, s, _ = h.shape
        heads = attn.q_proj.out_features // attn.head_dim
        if self.qkv[i] is not None:
            qkv = F.linear(h, *self.qkv[i])
        else:
            qkv = torch.cat([F.linear(h, m.weight, m.bias) for m in (attn.q_proj, attn.k_proj, attn.v_proj)], -1)
        qkv = qkv.view(b, s, -1, attn.head_dim).transpose(1, 2)  # (B, H + 2 H_kv, S, D)
        kv = (qkv.shape[1] - heads) // 2
        qk = _rotate(qkv[:, :heads + kv], cos, sin)  # queries and keys rotated in one pass
        q, k, v = qk[:, :heads], qk[:, heads:], qkv[:, heads + kv:]  # (B, H, S, D), (B, H_kv, S, D) x 2
        if self.keys is None:
            shape = (len(self.layers), b, k.shape[1], self.max_len, k.shape[-1])
            self.keys = torch.zeros(shape, dtype=k.dtype, device=k.device)
            self.values = torch.zeros(shape, dtype=v.dtype, device=v.device)
        self.keys[i, :, :, start:end], self.values[i, :, :, start:end] = k, v
        keys, values = self.keys[i, :, :, :end], self.values[i, :, :, :end]  # (B, H_kv, K, D)
        if s == 1:  # a decode step: two small batched products (CPU's fused sdpa is ~5x slower at one query)
            out = _one_query_attention(q, keys, values, mask, attn.scaling)
        else:
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling,
                                                 enable_gqa=q.shape[1] != k.shape[1])  # (B, H, S, D)
        out = out.transpose(1, 2).reshape(b, s, -1)
        return F.linear(out, *(self.out[i][0] if self.out[i] is not None else (attn.o_proj.weight, attn.o_proj.bias)))
