"""Policy forward passes on (prompt, completion) batches: per-token log-probs and entropy."""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.ops import entropy_from_logits, logprobs_from_logits


def sequence_logprobs(model: torch.nn.Module, prompt_ids: Tensor, prompt_mask: Tensor,
                      completion_ids: Tensor, completion_mask: Tensor, *, temperature: float = 1.0,
                      with_entropy: bool = False, entropy_grad: bool = False) -> tuple[Tensor, Tensor | None]:
    """Log-probs (N, T) of the completion tokens under ``model`` (and entropy (N, T) when asked;
    differentiable with ``entropy_grad`` so an entropy bonus can train on it).

    Prompts are left-padded, completions right-padded. Position ids count real tokens only, as
    generation does, so the result matches the sampler's log-probs. Logits are divided by the
    sampling temperature (the distribution the tokens were drawn from).
    """
    p = prompt_ids.shape[1]
    ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (N, P+T)
    attn = torch.cat([prompt_mask, completion_mask], dim=1)  # (N, P+T)
    positions = (attn.long().cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=attn.long(), position_ids=positions, use_cache=False)
    logits = out.logits[:, p - 1:-1]  # (N, T, V): the logits that predict each completion token
    if temperature != 1.0:
        logits = logits / temperature
    logprobs = logprobs_from_logits(logits, completion_ids)
    entropy = None
    if with_entropy:  # the softmax graph is kept only when an entropy bonus trains on it
        entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    return logprobs, entropy
