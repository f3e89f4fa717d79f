"""Log-probs (and entropy) of given completions under a model: the trainer-side forward pass that
matches :func:`rlvr.rollout.generate` exactly (same left-padding positions, same temperature)."""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import PreTrainedModel

from rlvr.ops import entropy_from_logits, logprobs_and_entropy, logprobs_from_logits


def sequence_logprobs(model: PreTrainedModel, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                      completion_mask: Tensor, temperature: float = 1.0,
                      with_entropy: bool = False, entropy_grad: bool = False) -> tuple[Tensor, Tensor | None]:
    """``log softmax(z / temperature)[y]`` for every completion token, (N, T) float32, keeping the
    autograd graph; and the entropy (N, T) of the same distribution when asked (differentiable only
    with ``entropy_grad``, for an entropy bonus: its softmax graph costs memory).

    Positions count real tokens only, ``(mask.cumsum(-1) − 1).clamp(min=0)``, as at generation time,
    so left-padded prompts score as they were sampled. Only the last T+1 positions go through the
    output layer, and the float32 softmax is taken chunk by chunk (never a float32 (N, T, V) copy). Values at untrained positions are whatever the model says there: mask them.
    """
    ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (N, P + T)
    mask = torch.cat([prompt_mask, completion_mask], dim=1).long()  # (N, P + T)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    t = completion_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=t + 1,
                   use_cache=False).logits
    logits = logits[:, :-1]  # (N, T, V) in the model's dtype: position P-1+t predicts token t
    if with_entropy and entropy_grad:
        return logprobs_and_entropy(logits, completion_ids, temperature=temperature)
    logprobs = logprobs_from_logits(logits, completion_ids, temperature=temperature)
    if not with_entropy:
        return logprobs, None
    return logprobs, entropy_from_logits(logits.detach(), temperature=temperature)
