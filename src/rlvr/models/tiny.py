"""Tiny Llama-style causal LMs for the CPU testbed, built from a config (nothing downloaded)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase


def build_tiny_model(tokenizer: PreTrainedTokenizerBase, hidden: int = 128, layers: int = 2, heads: int = 4,
                     intermediate: int | None = None, max_positions: int = 256, seed: int = 0,
                     tie_embeddings: bool = True) -> LlamaForCausalLM:
    """A freshly initialised ``LlamaForCausalLM`` whose vocabulary is ``len(tokenizer)``.

    ``intermediate`` defaults to ``4 * hidden``; at the defaults (hidden 128, 2 layers, 4 heads,
    tied embeddings, 100-token char vocabulary) the model has ~0.54 M parameters. ``seed`` fixes
    the initial weights without disturbing the caller's global RNG. pad/bos/eos ids come from the
    tokenizer and are written into ``config`` and ``generation_config``.
    """
    if hidden % heads:
        raise ValueError(f"build_tiny_model: hidden ({hidden}) must be divisible by heads ({heads})")
    ids = {name: getattr(tokenizer, f"{name}_token_id") for name in ("pad", "bos", "eos")}
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads,
        intermediate_size=intermediate or 4 * hidden, max_position_embeddings=max_positions,
        tie_word_embeddings=tie_embeddings, pad_token_id=ids["pad"], bos_token_id=ids["bos"],
        eos_token_id=ids["eos"], attn_implementation="sdpa")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    gen = model.generation_config
    gen.pad_token_id, gen.bos_token_id, gen.eos_token_id = ids["pad"], ids["bos"], ids["eos"]
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
