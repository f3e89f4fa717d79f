"""The Hugging Face ``generate`` engine, for models whose forward the loop engine does not suit."""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import GenerationConfig, PreTrainedModel

from rlvr.registry import register
from rlvr.rollout.engines.base import DecodeRequest, Engine
from rlvr.rollout.lockstep import active as lockstep_active


@register("engine", "hf")
class HFGenerateEngine(Engine):
    """Hugging Face ``model.generate`` (KV cache, raw logits kept for the log-probs).

    Temperature, top-k, top-p, min-p and repetition penalty go to ``GenerationConfig`` as they are
    (HF's repetition penalty also counts the left padding of a shorter prompt). A seed seeds the
    global RNG inside ``fork_rng`` (restored afterwards); each micro-batch gets its own seed.
    Log-probs come from ``output_logits`` (the raw logits) under :mod:`rlvr.rollout.hf`'s convention.

    Differs from loop:
      * HF's generation loop and logits processors; every row stays in the batch to the end;
      * seeded through the global RNG (forked), so its samples differ from loop's for one seed.

    Shapes: prompt ids / mask (N, P) → tokens, log-probs (N, T), T ≤ max_new_tokens.
    """

    runs_in_worker = True
    supports_hidden = True

    def decode(self, model: PreTrainedModel, request: DecodeRequest) -> tuple[Tensor, Tensor]:
        return decode_hf(model, request)


def decode_hf(model: PreTrainedModel, r: DecodeRequest) -> tuple[Tensor, Tensor]:
    s, prompt_ids = r.sampler, r.prompt_ids
    sampled = {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k,
               "min_p": s.min_p or None} if s.do_sample else {"temperature": None, "top_p": None, "top_k": None}
    config = GenerationConfig(
        max_new_tokens=r.max_new_tokens, do_sample=s.do_sample, use_cache=True, **sampled,
        repetition_penalty=s.repetition_penalty if s.penalised else None,
        pad_token_id=r.pad_id, eos_token_id=r.eos_ids.tolist(), output_logits=True,
        return_dict_in_generate=True)
    seed = s.fork_seed()
    with torch.random.fork_rng(devices=[] if prompt_ids.device.type == "cpu" else [prompt_ids.device]):
        if seed is not None:
            torch.manual_seed(seed)
        synced = {"synced_gpus": True} if lockstep_active() else {}  # sharded: every rank steps until all are done
        out = model.generate(input_ids=prompt_ids, attention_mask=r.prompt_mask.long(), generation_config=config,
                             **synced)
    tokens = out.sequences[:, prompt_ids.shape[1]:]  # (N, T)
    if r.capture is not None:  # generate keeps every row: one output-layer call per generated token
        for t, h in enumerate(r.capture.calls[:tokens.shape[1]]):
            r.capture.hidden[:, t] = h
    if tokens.shape[1] == 0:
        return tokens, torch.zeros(tokens.shape, dtype=torch.float32, device=tokens.device)
    logits = torch.stack(out.logits, dim=1).float() / s.temperature  # (N, T, V) raw, then scaled
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return tokens, logprobs
