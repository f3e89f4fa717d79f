"""The default engine: a short decode loop over the model's own forward with a KV cache."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from rlvr.registry import param, register
from rlvr.rollout.engines.base import DecodeRequest, Engine, cache_kwargs
from rlvr.rollout.sampling import seen_tokens


@dataclass(frozen=True)
class LoopConfig:
    compact: bool = param(True, "finished rows leave the forward and the KV cache at once (the sampler still "
                                "draws for the rows it drew for before, so the tokens are unchanged); False = "
                                "they stay until they are a quarter of the batch")


@register("engine", "loop")
class LoopEngine(Engine):
    """KV-cache decode loop (default): one forward per token, finished rows leave the batch.

    It skips ``generate``'s logits processors and stopping criteria. A finished row leaves the
    forward and the ``DynamicCache`` at the next step (``compact``); the sampler keeps drawing for it
    (from a dummy distribution, the token is masked) until finished rows are a quarter of its
    batch, so every live row gets the same random draws as when finished rows were computed along.
    Measured on 2 CPU threads, 0.54 M model, 64 prompts: ~120 ms vs ~150 ms for ``generate``
    (trained model, mean length 33, before ``compact``).
    Sampling (temperature, top-k, top-p, min-p, repetition penalty) is
    :class:`rlvr.rollout.sampling.Sampler`; the repetition penalty counts a row's real prompt
    tokens and its own completion (HF's also counts left padding).

    Differs from hf (``model.generate``):
      * one hand-written loop, no logits processors; same distribution for the same settings;
      * its own seeded generator, so a seed reproduces without touching the global RNG.

    Shapes: prompt ids / mask (N, P) → tokens, log-probs (N, T), T ≤ max_new_tokens.
    """

    Config = LoopConfig
    supports_hidden = True

    def decode(self, model: PreTrainedModel, request: DecodeRequest) -> tuple[Tensor, Tensor]:
        return decode_loop(model, request, compact=self.config.compact)


def decode_loop(model: PreTrainedModel, r: DecodeRequest, compact: bool = False) -> tuple[Tensor, Tensor]:
    """Decode with a DynamicCache. The sampler's batch drops finished rows once they are a quarter of
    it; with ``compact`` (not with a hidden-state capture) the forward and the cache drop each
    finished row at once and the sampler gets a dummy row for it, so its draws are unchanged."""
    prompt_ids, sampler, capture = r.prompt_ids, r.sampler, r.capture
    compact = compact and capture is None  # captured hidden states follow the sampler's rows
    n, dev = prompt_ids.shape[0], prompt_ids.device
    tokens = torch.full((n, r.max_new_tokens), r.pad_id, dtype=torch.long, device=dev)  # (N, T)
    logprobs = torch.zeros((n, r.max_new_tokens), dtype=torch.float32, device=dev)  # (N, T)
    rows = torch.arange(n, device=dev)  # (B,) original row of each row the sampler draws for
    live = rows  # (L,) original row of each row in the forward and the cache; L = B unless compact
    attn = r.prompt_mask.long()  # (L, P + t)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # left padding: real tokens count from 0
    cache = DynamicCache(config=model.config)
    cache_kw = cache_kwargs(model, cache)
    logits = model(input_ids=prompt_ids, attention_mask=attn, position_ids=pos, **cache_kw,
                   use_cache=True, logits_to_keep=1).logits[:, -1, :]  # (L, V)
    seen = seen_tokens(prompt_ids, r.prompt_mask, logits.shape[-1]) if sampler.penalised else None  # (N, V)
    next_pos = pos[:, -1:] + 1  # (L, 1)
    finished = torch.zeros(n, dtype=torch.bool, device=dev)  # (B,)
    steps = 0
    for t in range(r.max_new_tokens):
        token, lp = sampler(_spread(logits, live, rows), None if seen is None else seen[rows])  # (B,), (B,)
        tokens[rows, t], logprobs[rows, t] = token, lp  # tokens after a row's eos are masked later
        if seen is not None:
            seen[rows, token] = True
        if capture is not None:
            capture.store(rows, t)
        steps = t + 1
        finished = finished | torch.isin(token, r.eos_ids)
        n_done = int(finished.sum())
        if steps == r.max_new_tokens or n_done == rows.numel():
            break
        if 4 * n_done >= rows.numel():
            keep = (~finished).nonzero().squeeze(-1)
            rows, token, finished = rows[keep], token[keep], finished[keep]
        going = rows[~finished] if compact else rows  # (L',) rows the next forward computes
        if going.numel() < live.numel():
            kept = torch.isin(live, going).nonzero().squeeze(-1)  # both keep the original row order
            cache.batch_select_indices(kept)
            live, attn, next_pos = going, attn[kept], next_pos[kept]
        feed = token[~finished] if compact else token  # (L,)
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=-1)
        logits = model(input_ids=feed.unsqueeze(-1), attention_mask=attn, position_ids=next_pos,
                       **cache_kw, use_cache=True).logits[:, -1, :]
        next_pos = next_pos + 1
    return tokens[:, :steps], logprobs[:, :steps]


def _spread(logits: Tensor, live: Tensor, rows: Tensor) -> Tensor:
    """(B, V) the sampler's logits: the forward's (L, V) at the live rows, zeros (a dummy uniform
    distribution whose draw is masked) at finished rows still in the sampler's batch."""
    if live.numel() == rows.numel():
        return logits
    full = torch.zeros((rows.numel(), logits.shape[-1]), dtype=logits.dtype, device=logits.device)
    full[torch.isin(rows, live)] = logits
    return full
