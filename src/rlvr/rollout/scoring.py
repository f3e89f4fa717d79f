"""Log-probs (and entropy) of given completions under a model: the trainer-side forward pass that
matches :func:`rlvr.rollout.generate` exactly (same left-padding positions, same temperature), padded
(:func:`sequence_logprobs`) or packed padding-free (:func:`packed_logprobs`, where
:func:`packing_unsupported` finds nothing against it)."""

from __future__ import annotations

import inspect
import sys

import torch
from torch import Tensor
from transformers import PreTrainedModel, masking_utils

from rlvr.models.rowwise_attention import ROWWISE_SDPA, RowLayout, row_index
from rlvr.ops import entropy_from_logits, logprobs_and_entropy, logprobs_from_logits
from rlvr.packing import pack_rows


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


def packed_logprobs(model: PreTrainedModel, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                    completion_mask: Tensor, temperature: float = 1.0,
                    with_entropy: bool = False, entropy_grad: bool = False) -> tuple[Tensor, Tensor | None]:
    """:func:`sequence_logprobs` of the same rows in one padding-free forward: the rows laid end to
    end in a (1, L) sequence (``rlvr.packing.pack_rows``), positions restarting at 0 per row. Row-wise
    sdpa (``rlvr.models.rowwise_attention``) gets the rows' index as its mask and attends row by row;
    other implementations get no mask, so transformers builds a block-diagonal causal mask from the
    positions (``masking_utils.find_packed_sequence_indices``; flash-attention reads the positions).
    Only the positions that predict a completion token go through the output layer. Returns (n, T) as
    the padded pass, 0 at columns past a row's last real token (padding there: mask them)."""
    packed = pack_rows(prompt_ids, prompt_mask, completion_ids, completion_mask)
    rows: dict = {"attention_mask": None}
    if attention_implementation(model) == ROWWISE_SDPA:  # the rows' index as the mask, and their buckets
        index = row_index(packed.position_ids)  # (1, 1, n, W)
        rows = {"attention_mask": index, "row_layout": RowLayout.of(index[0, 0])}
    logits = model(input_ids=packed.input_ids, position_ids=packed.position_ids, logits_to_keep=packed.predict,
                   use_cache=False, **rows).logits  # (1, K, V)
    targets = packed.targets.view(1, -1)  # (1, K)
    if with_entropy and entropy_grad:
        logprobs, entropy = logprobs_and_entropy(logits, targets, temperature=temperature)
        return packed.unpack(logprobs[0]), packed.unpack(entropy[0])
    logprobs = packed.unpack(logprobs_from_logits(logits, targets, temperature=temperature)[0])
    if not with_entropy:
        return logprobs, None
    return logprobs, packed.unpack(entropy_from_logits(logits.detach(), temperature=temperature)[0])


PACKED_ATTENTION = ("sdpa", "eager", "flash_attention_2", "flash_attention_3", ROWWISE_SDPA)
# Implementations that compute each packed row's attention alone (varlen kernels, row-wise sdpa): no
# wasted work. sdpa and eager compute the whole L x L score matrix of a pack under a block-diagonal mask.
ROW_WISE_ATTENTION = ("flash_attention_2", "flash_attention_3", ROWWISE_SDPA)


def attention_implementation(model: torch.nn.Module) -> str | None:
    """The transformers attention implementation of ``model`` (wrappers looked through)."""
    return getattr(getattr(innermost(model), "config", None), "_attn_implementation", None)


def packing_unsupported(model: torch.nn.Module) -> str | None:
    """Why ``model`` cannot take packed rows, or None when it can: its attention implementation must
    be one of ``PACKED_ATTENTION`` and its modelling code must build masks with transformers'
    ``masking_utils.create_causal_mask`` (which finds packed rows from the position ids) and take a
    tensor ``logits_to_keep``. Wrappers (DDP, peft, the LoRA reference) are looked through."""
    base = innermost(model)
    impl = attention_implementation(base)
    if impl not in PACKED_ATTENTION:
        return f"attention implementation '{impl}' is not one of {', '.join(PACKED_ATTENTION)}"
    code = sys.modules.get(type(base).__module__)
    if getattr(code, "create_causal_mask", None) is not masking_utils.create_causal_mask:
        return f"{type(base).__name__} does not build its masks with transformers.masking_utils"
    if "logits_to_keep" not in inspect.signature(base.forward).parameters:
        return f"{type(base).__name__}.forward takes no logits_to_keep"
    return None


def innermost(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under DDP (``module``), peft (``get_base_model``) and
    ``rlvr.models.lora.AdapterDisabled`` (``policy``) wrappers."""
    for _ in range(8):
        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
            continue
        inner = model._modules.get("module") or model._modules.get("policy")
        if inner is None:
            return model
        model = inner
    return model
