"""Test helpers on the tiny model: the gradient of a loss with respect to the logits."""

from __future__ import annotations

import torch

from rlvr.losses.objective import Objective
from rlvr.registry import build
from rlvr.rollout import sequence_logprobs
from rlvr.types import LossInputs


def logit_grads(model: torch.nn.Module, batch, loss_name: str, params: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient of the objective w.r.t. the logits that predict each completion token (N, T, V), and the
    advantages used (N, T): +1 on even rows, −1 on odd rows. The model is left in eval mode, no grads."""
    store = {}

    def keep(_module, _inputs, output):
        output.retain_grad()
        store["logits"] = output

    handle = model.lm_head.register_forward_hook(keep)
    try:
        model.train()
        logp, _ = sequence_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.attention)
        adv = torch.where(torch.arange(batch.num_rows)[:, None] % 2 == 0, 1.0, -1.0).expand_as(logp).contiguous()
        inputs = LossInputs(logprobs=logp, old_logprobs=logp.detach(), advantages=adv, mask=batch.completion_mask,
                            token_origin=batch.token_origin, behaviour_logprobs=batch.behaviour_logprobs)
        loss, _ = Objective(build("loss", loss_name, **params), kl_coef=0.0)(inputs)
        loss.backward()
    finally:
        handle.remove()
        model.zero_grad(set_to_none=True)
        model.eval()
    return store["logits"].grad[:, :-1], adv  # position t of the kept logits predicts completion token t


def trained_lora_policy(hidden: int, layers: int, r: int, alpha: float) -> torch.nn.Module:
    """A tiny character model with LoRA adapters whose B is random (a trained adapter: B starts at zero,
    which would make the merged weights equal the base's)."""
    from rlvr.models import build_char_tokenizer, build_tiny_model
    from rlvr.models.lora import add_lora
    from rlvr.models.lora_spec import LoraSpec
    policy = add_lora(build_tiny_model(build_char_tokenizer(), hidden=hidden, layers=layers, heads=2),
                      LoraSpec(r=r, alpha=alpha))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_()
    return policy
