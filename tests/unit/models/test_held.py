"""Frozen Linear weights held in the compute dtype (rlvr.models.held): bytes halved, autocast passes
bit for bit those of the float32 weights, passes outside autocast those of the rounded weights."""

from __future__ import annotations

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlvr.models.held import HeldLinear, hold_frozen_linears, release_held
from rlvr.models.lora import add_lora
from rlvr.models.lora_spec import LoraSpec

CONFIG = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2)


def _policy(tied: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    policy = add_lora(LlamaForCausalLM(LlamaConfig(**CONFIG, tie_word_embeddings=tied)),
                      LoraSpec(r=4, alpha=8, target_modules=("all-linear",)))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:  # B starts at zero: a trained adapter
                p.normal_(std=0.05)
    return policy


def _bytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def _loss_and_grads(policy: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    policy.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = policy(ids).logits  # (B, L, V)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                             ids[:, 1:].reshape(-1))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in policy.named_parameters() if p.requires_grad}


def test_a_lora_base_is_held_in_bf16_and_its_autocast_step_is_bit_for_bit_the_float32_one():
    for tied in (False, True):
        policy = _policy(tied)
        plain = copy.deepcopy(policy)  # float32 base: the computation before
        frozen_before = _bytes(p for p in policy.parameters() if not p.requires_grad)
        linears = [m for m in policy.modules() if type(m) is torch.nn.Linear and not m.weight.requires_grad]
        head = policy.get_output_embeddings()
        freed = hold_frozen_linears(policy, torch.bfloat16)
        held = [m for m in policy.modules() if type(m) is HeldLinear]
        # every frozen Linear (the adapted layers' bases, an untied head) is held; a tied head is the
        # embedding's tensor, read by a lookup autocast does not cast, so it stays float32
        assert len(held) == len(linears) - tied and all(m.weight.dtype == torch.bfloat16 for m in held)
        assert (head.weight.dtype == torch.float32) == tied
        assert all(p.dtype == torch.float32 for p in policy.parameters() if p.requires_grad)
        assert policy.get_input_embeddings().weight.dtype == torch.float32
        held_numel = sum(p.numel() for m in held for p in m.parameters())
        assert freed == 2 * held_numel  # 4 -> 2 bytes per held value
        assert _bytes(p for p in policy.parameters() if not p.requires_grad) == frozen_before - freed
        # autocast rounds a float32 weight to bf16 at every Linear call: the held weight is that same
        # value, so the loss and every adapter gradient are equal bit for bit (tolerance 0)
        ids = torch.randint(0, CONFIG["vocab_size"], (3, 9), generator=torch.Generator().manual_seed(1))
        loss, grads = _loss_and_grads(policy, ids)
        loss0, grads0 = _loss_and_grads(plain, ids)
        assert torch.isfinite(loss) and torch.equal(loss, loss0)
        assert grads.keys() == grads0.keys() and all(torch.equal(grads[k], grads0[k]) for k in grads)
        with policy.disable_adapter(), plain.disable_adapter(), torch.no_grad(), \
                torch.autocast("cpu", dtype=torch.bfloat16):  # the KL reference (adapter off)
            assert torch.equal(policy(ids).logits, plain(ids).logits)


def test_outside_autocast_a_held_layer_computes_with_its_rounded_weight():
    policy = _policy(tied=False)
    rounded = copy.deepcopy(policy)  # float32 Linear layers whose frozen weights were rounded to bf16
    with torch.no_grad():
        for m in rounded.modules():
            if type(m) is torch.nn.Linear and not m.weight.requires_grad:
                m.weight.copy_(m.weight.bfloat16().float())
    hold_frozen_linears(policy, torch.bfloat16)
    ids = torch.randint(0, CONFIG["vocab_size"], (2, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():  # float32 input, no autocast: the weight is lifted to float32 for the call
        assert torch.equal(policy(ids).logits, rounded(ids).logits)
    release_held(policy)  # what an export merges: float32 Linear layers holding the rounded values
    assert not any(type(m) is HeldLinear for m in policy.modules())
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    merged, expected = policy.merge_and_unload().state_dict(), rounded.merge_and_unload().state_dict()
    assert all(torch.equal(merged[k], expected[k]) for k in expected)
