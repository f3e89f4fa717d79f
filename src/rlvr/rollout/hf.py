"""Generation with a Hugging Face causal LM: prompts in, completions + log-probs out.

:func:`generate` / :func:`generate_ids` are the one entry point; the token-by-token work is done by
an engine (:mod:`rlvr.rollout.engines`, a registry kind: ``loop`` by default, ``hf``, ``specroll``,
``vllm``, or ``"pkg.module:MyEngine"``), chosen by ``engine`` with options ``engine_params``
(the config's ``rollout.engine`` spec: its name and its options); engine statistics come back in
``Generation.stats``. ``micro_batch_size`` decodes that many rows per engine call (the results are
concatenated and padded to a common T); greedy results do not depend on it, and sampling is
reproducible for a given seed and micro-batch size. Engine statistics of a micro-batched call are
row-weighted means over its engine calls (SpecRoll then counts each micro-batch as a window).

Log-prob convention (every engine): ``logprobs[i, t] = log softmax(z_t / temperature)[y_t]`` with
``z_t`` the raw logits, *before* the repetition penalty and top-k / top-p / min-p filtering — the
quantity a trainer recomputes with the same temperature (verl and TRL divide logits by the
temperature and ignore the filters). At temperature 1 it equals the model's plain log-softmax.
Greedy decoding (``do_sample=False``) ignores the temperature and reports the plain log-softmax.
A repetition penalty ≠ 1 (HF semantics, :func:`rlvr.rollout.sampling.repetition_penalty`) changes
which tokens are drawn but not the reported log-prob: like a filter it makes the sampling
distribution differ from the reported (trained) one, so the rollout is slightly off-policy.
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlvr.rollout.engines.base import DecodeRequest, Engine, Generation, HiddenCapture, engine_for
from rlvr.rollout.lockstep import gathered
from rlvr.rollout.sampling import Sampler

__all__ = ["Generation", "encode_prompts", "generate", "generate_ids"]


def generate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[str], *,
             max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
             min_p: float = 0.0, repetition_penalty: float = 1.0, do_sample: bool = True,
             seed: int | None = None, engine: str = "loop", keep_hidden: bool = False,
             engine_params: dict | None = None, micro_batch_size: int = 0) -> Generation:
    """Sample (or greedily decode) one completion per prompt with a KV cache.

    ``seed`` makes sampling reproducible without touching the global RNG; ``None`` draws from it.
    ``top_k=0``, ``top_p=1``, ``min_p=0`` and ``repetition_penalty=1`` mean no filtering and no
    penalty. ``keep_hidden`` also returns the output layer's input at every generated position
    (``Generation.hidden``), captured by a forward hook.
    """
    if not prompts:
        raise ValueError("generate: empty list of prompts")
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts)
    return generate_ids(model, tokenizer, prompt_ids, prompt_mask, max_new_tokens=max_new_tokens,
                        temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                        repetition_penalty=repetition_penalty, do_sample=do_sample, seed=seed, engine=engine,
                        keep_hidden=keep_hidden, engine_params=engine_params, micro_batch_size=micro_batch_size)


@torch.no_grad()  # not inference_mode: the outputs feed autograd graphs later (gather indices)
def generate_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompt_ids: Tensor,
                 prompt_mask: Tensor, *, max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
                 top_k: int = 0, min_p: float = 0.0, repetition_penalty: float = 1.0, do_sample: bool = True,
                 seed: int | None = None, engine: str = "loop", keep_hidden: bool = False,
                 engine_params: dict | None = None, micro_batch_size: int = 0) -> Generation:
    """:func:`generate` from left-padded token ids (N, P) and their bool mask: the entry point for
    samplers that build contexts token by token (a prompt plus a prefix or a hint)."""
    decoder = engine_for(model, engine, engine_params)
    if prompt_ids.shape[0] == 0:
        raise ValueError("generate: empty batch of prompts")
    check_sampling(temperature if do_sample else 1.0, top_p, top_k, min_p, repetition_penalty, micro_batch_size)
    if keep_hidden and not decoder.supports_hidden:
        raise ValueError(f"generate: keep_hidden is not supported by the {engine} engine")
    pad_id, eos_ids = _special_ids(model, tokenizer)
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)  # (N, P), (N, P)
    sampler = Sampler(temperature if do_sample else 1.0, top_p, top_k, do_sample, seed, device, min_p,
                      repetition_penalty)
    step = micro_batch_size if micro_batch_size > 0 else prompt_ids.shape[0]
    was_training = model.training
    model.eval()
    try:
        with gathered(model):  # sharded: parameters gathered once for the call, not once per forward
            parts = [_decode_chunk(model, decoder, DecodeRequest(prompt_ids[i:i + step], prompt_mask[i:i + step],
                                                                 max_new_tokens, sampler, pad_id, eos_ids),
                                   keep_hidden)
                     for i in range(0, prompt_ids.shape[0], step)]
    finally:
        model.train(was_training)
    tokens = _pad_cat([p[0] for p in parts], pad_id)  # (N, T)
    mask = _pad_cat([p[1] for p in parts], False)  # (N, T)
    logprobs = _pad_cat([p[2] for p in parts], 0.0)  # (N, T)
    hidden = None if not keep_hidden else _pad_cat([p[3] for p in parts], 0.0)  # (N, T, H)
    texts = tokenizer.batch_decode(tokens, skip_special_tokens=True)
    return Generation(prompt_ids, prompt_mask, tokens, mask, logprobs, texts, hidden, _merge_stats(parts))


def _decode_chunk(model: PreTrainedModel, decoder: Engine, request: DecodeRequest,
                  keep_hidden: bool) -> tuple[Tensor, Tensor, Tensor, Tensor | None, dict[str, float], int]:
    """One engine call: tokens, mask, log-probs (n, t), hidden (n, t, H) or None, stats, rows n."""
    n = request.prompt_ids.shape[0]
    if keep_hidden:
        request.capture = HiddenCapture(model, n, request.max_new_tokens)
    try:
        tokens, logprobs = decoder.decode(model, request)  # (n, t), (n, t)
    finally:
        if request.capture is not None:
            request.capture.close()
    mask = _mask_through_first_eos(tokens, request.eos_ids)  # (n, t)
    tokens = torch.where(mask, tokens, torch.full_like(tokens, request.pad_id))
    logprobs = torch.where(mask, logprobs, torch.zeros_like(logprobs))
    hidden = None
    if request.capture is not None:
        hidden = request.capture.hidden[:, :tokens.shape[1]] * mask.unsqueeze(-1)  # (n, t, H)
    return tokens, mask, logprobs, hidden, dict(decoder.last_stats), n


def _pad_cat(parts: list[Tensor], value: float | int | bool) -> Tensor:
    """Concatenate (n_i, t_i, ...) tensors along rows, right-padding dim 1 to the longest t_i."""
    if len(parts) == 1:
        return parts[0]
    width = max(p.shape[1] for p in parts)
    padded = [torch.nn.functional.pad(p, (0, 0) * (p.dim() - 2) + (0, width - p.shape[1]), value=value)
              if p.shape[1] < width else p for p in parts]
    return torch.cat(padded, dim=0)


def _merge_stats(parts: list[tuple]) -> dict[str, float]:
    """Engine statistics over micro-batches: each key's mean weighted by the micro-batch's rows."""
    if len(parts) == 1:
        return parts[0][4]
    total: dict[str, float] = {}
    rows: dict[str, int] = {}
    for *_, stats, n in parts:
        for key, value in stats.items():
            total[key] = total.get(key, 0.0) + float(value) * n
            rows[key] = rows.get(key, 0) + n
    return {key: total[key] / rows[key] for key in total}


def check_sampling(temperature: float, top_p: float, top_k: int, min_p: float, repetition_penalty: float,
                   micro_batch_size: int = 0) -> None:
    """Clear errors for sampling settings outside their ranges."""
    if temperature <= 0:
        raise ValueError(f"generate: temperature must be > 0 when sampling, got {temperature}")
    if not 0.0 < top_p <= 1.0 or top_k < 0 or not 0.0 <= min_p <= 1.0:
        raise ValueError(f"generate: need 0 < top_p <= 1, top_k >= 0 and 0 <= min_p <= 1, got top_p={top_p}, "
                         f"top_k={top_k}, min_p={min_p}")
    if repetition_penalty <= 0 or micro_batch_size < 0:
        raise ValueError(f"generate: need repetition_penalty > 0 and micro_batch_size >= 0, got "
                         f"{repetition_penalty}, {micro_batch_size}")


def encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: list[str]) -> tuple[Tensor, Tensor]:
    """Left-padded ids (N, P) and bool mask (N, P). Special tokens (our ``<bos>``) are added unless
    every prompt already starts with the bos text, as a chat template's output may."""
    if tokenizer.pad_token_id is None:
        raise ValueError("generate: the tokenizer has no pad token; set tokenizer.pad_token "
                         "(load_tokenizer uses the eos token)")
    bos = tokenizer.bos_token
    add = not (bos and all(p.startswith(bos) for p in prompts))
    enc = tokenizer(prompts, padding=True, padding_side="left", add_special_tokens=add, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"].bool()


def _mask_through_first_eos(tokens: Tensor, eos_ids: Tensor) -> Tensor:
    """(N, T) bool: True up to and including the first eos of each row (all True if none)."""
    is_eos = torch.isin(tokens, eos_ids).long()  # (N, T)
    before = is_eos.cumsum(-1) - is_eos  # eos tokens strictly before t
    return before == 0


def _special_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> tuple[int, Tensor]:
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("generate: neither the model's generation_config nor the tokenizer has an eos token id")
    eos_list = [eos] if isinstance(eos, int) else list(eos)
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = model.generation_config.pad_token_id
    if pad is None:
        pad = eos_list[0]
    device = next(model.parameters()).device
    return int(pad), torch.tensor(eos_list, dtype=torch.long, device=device)
