"""The default engine: a short decode loop over the model's own forward with a KV cache."""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from rlvr.registry import register
from rlvr.rollout.engines.base import DecodeRequest, Engine, cache_kwargs
from rlvr.rollout.lockstep import any_running
from rlvr.rollout.sampling import seen_tokens


@register("engine", "loop")
class LoopEngine(Engine):
    """KV-cache decode loop (default): one forward per token, finished rows leave the batch.

    It skips ``generate``'s logits processors and stopping criteria and drops finished rows from
    the batch and the ``DynamicCache`` once they are a quarter of it. Measured on 2 CPU threads,
    0.54 M model, 64 prompts: ~120 ms vs ~150 ms for ``generate`` (trained model, mean length 33).
    Sampling (temperature, top-k, top-p, min-p, repetition penalty) is
    :class:`rlvr.rollout.sampling.Sampler`; the repetition penalty counts a row's real prompt
    tokens and its own completion (HF's also counts left padding).

    Differs from hf (``model.generate``):
      * one hand-written loop, no logits processors; same distribution for the same settings;
      * its own seeded generator, so a seed reproduces without touching the global RNG.

    Shapes: prompt ids / mask (N, P) → tokens, log-probs (N, T), T ≤ max_new_tokens.
    """

    supports_hidden = True

    def decode(self, model: PreTrainedModel, request: DecodeRequest) -> tuple[Tensor, Tensor]:
        return decode_loop(model, request)


def decode_loop(model: PreTrainedModel, r: DecodeRequest) -> tuple[Tensor, Tensor]:
    """Decode with a DynamicCache; rows that have finished are dropped from the batch (and their
    cache) once they are a quarter of it, so short completions stop costing compute.

    Under lock-step (sharded parameters, ``rlvr.rollout.lockstep``) the loop goes on until every
    rank is done: a rank whose rows have all finished keeps one finished row and runs its forward
    (output unused) so every rank runs the same forwards. Elsewhere the loop is unchanged."""
    prompt_ids, sampler, capture = r.prompt_ids, r.sampler, r.capture
    n, dev = prompt_ids.shape[0], prompt_ids.device
    tokens = torch.full((n, r.max_new_tokens), r.pad_id, dtype=torch.long, device=dev)  # (N, T)
    logprobs = torch.zeros((n, r.max_new_tokens), dtype=torch.float32, device=dev)  # (N, T)
    rows = torch.arange(n, device=dev)  # (B,) original row of each row still in the batch
    attn = r.prompt_mask.long()  # (B, P + t)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # left padding: real tokens count from 0
    cache = DynamicCache(config=model.config)
    cache_kw = cache_kwargs(model, cache)
    logits = model(input_ids=prompt_ids, attention_mask=attn, position_ids=pos, **cache_kw,
                   use_cache=True, logits_to_keep=1).logits[:, -1, :]  # (B, V)
    seen = seen_tokens(prompt_ids, r.prompt_mask, logits.shape[-1]) if sampler.penalised else None  # (N, V)
    next_pos = pos[:, -1:] + 1  # (B, 1)
    finished = torch.zeros(n, dtype=torch.bool, device=dev)  # (B,)
    steps, idle = 0, False  # idle: this rank is done but another still decodes (lock-step only)
    for t in range(r.max_new_tokens):
        if not idle:
            token, lp = sampler(logits, None if seen is None else seen[rows])  # (B,), (B,)
            tokens[rows, t], logprobs[rows, t] = token, lp  # tokens after a row's eos are masked later
            if seen is not None:
                seen[rows, token] = True
            if capture is not None:
                capture.store(rows, t)
            steps = t + 1
            finished = finished | torch.isin(token, r.eos_ids)
        n_done = int(finished.sum())
        done = steps == r.max_new_tokens or n_done == rows.numel()
        if not any_running(not done):  # without lock-step: stop when this batch is done
            break
        idle = done
        if 4 * n_done >= rows.numel():
            keep = (~finished).nonzero().squeeze(-1) if not idle else torch.zeros(1, dtype=torch.long, device=dev)
            cache.batch_select_indices(keep)
            rows, attn, next_pos, token, finished = rows[keep], attn[keep], next_pos[keep], token[keep], finished[keep]
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=-1)
        logits = model(input_ids=token.unsqueeze(-1), attention_mask=attn, position_ids=next_pos,
                       **cache_kw, use_cache=True).logits[:, -1, :]
        next_pos = next_pos + 1
    return tokens[:, :steps], logprobs[:, :steps]
