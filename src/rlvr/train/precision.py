"""Precision and memory settings of the policy (docs/design.md §6, real-scale rules).

- ``model.dtype``: the parameters' dtype at load (``auto`` keeps the checkpoint's own, but a half-precision
  checkpoint trained in full gets float32 master weights, ``master_dtype``).
- ``run.mixed_precision``: ``bf16`` / ``fp16`` autocast around the policy's forward passes while the
  trained parameters, gradients and AdamW state stay float32 (the master weights); ``fp16`` adds a
  gradient scaler, since fp16 gradients underflow without one. Frozen ``Linear`` weights (a LoRA
  policy's base, a full fine-tuning run's KL reference) are stored in the autocast dtype
  (``hold_frozen``, :mod:`rlvr.models.held`), which autocast would round them to at every call anyway.
- ``model.attn_implementation`` and ``model.gradient_checkpointing`` (non-reentrant; Hugging Face
  models only recompute in training mode, so generation with the KV cache is unaffected), recomputing
  every op of a layer or, with ``model.recompute=elementwise``, all but its matrix products and attention
  (:mod:`rlvr.models.recompute`). Where passes
  may be packed (``optim.packing`` auto or always), sdpa runs as row-wise sdpa
  (``rlvr.models.rowwise_attention``): transformers' sdpa for every padded pass and for generation,
  row by row for a packed one.
"""

from __future__ import annotations

import warnings
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from rlvr.models.held import hold_frozen_linears
from rlvr.models.recompute import checkpoint_kwargs
from rlvr.notice import notice
from rlvr.train.config import Config, ConfigError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
HALF = (torch.bfloat16, torch.float16)


def load_dtype(cfg: Config) -> torch.dtype | str:
    """The dtype to load the policy in: float32 under mixed precision (master weights), else ``model.dtype``."""
    mixed, dtype = cfg.run.mixed_precision, cfg.model.dtype
    if mixed != "no":
        if dtype in ("bfloat16", "float16"):
            raise ConfigError(f"run.mixed_precision={mixed} keeps float32 master weights, but model.dtype={dtype} "
                              f"asks for half-precision parameters; set model.dtype=auto (or float32)")
        return torch.float32
    return DTYPES.get(dtype, "auto")


def configure_policy(model: torch.nn.Module, cfg: Config) -> torch.nn.Module:
    """Cast ``model`` to the configured dtype and set its attention kernel and gradient checkpointing."""
    dtype = master_dtype(model, cfg, load_dtype(cfg))
    if dtype != "auto" and any(p.dtype != dtype for p in model.parameters() if p.is_floating_point()):
        model.to(dtype)
    kernel = attention_kernel(model, cfg)
    try:
        set_attention(model, kernel)
    except ConfigError:  # a transformers that does not take a registered implementation: sdpa, padded passes
        if kernel == cfg.model.attn_implementation:
            raise
        set_attention(model, cfg.model.attn_implementation)
    if cfg.model.gradient_checkpointing:
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise ConfigError(f"model.gradient_checkpointing: {type(model).__name__} does not support it")
        kwargs = checkpoint_kwargs(cfg.model.recompute)
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x (the old name is deprecated)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        # transformers also hooks the input embeddings so that their output requires grad: reentrant
        # checkpointing needs it, the non-reentrant kind used here does not, and the hook would make the
        # lean decoder refuse the model (it refuses hooked decoders), so generation would run slower
        if getattr(model, "_require_grads_hook", None) is not None:
            model.disable_input_require_grads()
    return model


def hold_frozen(model: torch.nn.Module, cfg: Config) -> int:
    """Under ``run.mixed_precision``, ``model``'s frozen ``Linear`` weights (a LoRA policy's base, a frozen
    reference) stored in the autocast dtype (:mod:`rlvr.models.held`): bit for bit the same autocast
    passes at half the bytes; trainable parameters stay float32. Returns the bytes freed (0 without
    mixed precision)."""
    mixed = cfg.run.mixed_precision
    return 0 if mixed == "no" else hold_frozen_linears(model, AUTOCAST[mixed])


def master_dtype(model: torch.nn.Module, cfg: Config, dtype: torch.dtype | str) -> torch.dtype | str:
    """``dtype``, except that a half-precision checkpoint loaded with ``model.dtype=auto`` and trained in full
    (no LoRA) gets float32 master weights: AdamW on bf16 parameters rounds away every update below ~1/256
    of a weight, most of them at RL learning rates. ``model.dtype=bfloat16`` (or float16) keeps pure half
    precision, with the optimizer's warning."""
    if dtype != "auto" or cfg.model.lora is not None:
        return dtype
    half = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.dtype in HALF})
    if not half:
        return dtype
    notice(f"model.path holds {'/'.join(half)} weights: training float32 master weights (model.dtype=auto); "
           f"run.mixed_precision=bf16 adds bf16 autocast, model.dtype={half[0]} trains in {half[0]} alone")
    return torch.float32


def attention_kernel(model: torch.nn.Module, cfg: Config) -> str:
    """The attention implementation ``model`` runs: ``model.attn_implementation``, except that sdpa is
    row-wise sdpa where passes may be packed, the model takes packed rows and row-wise sdpa computes
    its attention exactly (``rowwise_refusal``: no sliding window, no soft-cap)."""
    from rlvr.models.rowwise_attention import AVAILABLE, ROWWISE_SDPA, rowwise_refusal
    from rlvr.rollout.scoring import packing_unsupported
    name = cfg.model.attn_implementation
    if name != "sdpa" or not AVAILABLE or cfg.optim.packing == "never":
        return name
    return ROWWISE_SDPA if packing_unsupported(model) is None and rowwise_refusal(model) is None else name


def check_attention(name: str) -> None:
    """A clear error, before any loading, when the attention kernel is not installed here."""
    if name == "flash_attention_2":
        from transformers.utils import is_flash_attn_2_available
        if not is_flash_attn_2_available():
            raise ConfigError("model.attn_implementation=flash_attention_2 needs the flash-attn package and a "
                              "CUDA GPU, which this machine lacks; use sdpa or eager")


def set_attention(model: torch.nn.Module, name: str) -> None:
    """Switch a Hugging Face model's attention kernel, with a clear error when it is unavailable."""
    check_attention(name)
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", name) == name:
        return
    try:
        model.set_attn_implementation(name)
    except (ValueError, ImportError) as err:
        raise ConfigError(f"model.attn_implementation={name}: {err}") from err


def autocast(cfg: Config, device: torch.device) -> AbstractContextManager:
    """The autocast context of ``run.mixed_precision`` on ``device`` (a no-op context for ``no``)."""
    mixed = cfg.run.mixed_precision
    if mixed == "no":
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=AUTOCAST[mixed])


def grad_scaler(cfg: Config, device: torch.device) -> Any:
    """A ``torch.amp.GradScaler`` for fp16 mixed precision, else None (bf16 has fp32's exponent range)."""
    if cfg.run.mixed_precision != "fp16":
        return None
    return torch.amp.GradScaler(device.type)


def warn_half_updates(params: list[torch.Tensor]) -> None:
    """Warn when the optimizer would update half-precision parameters in half precision."""
    half = sorted({str(p.dtype).removeprefix("torch.") for p in params if p.dtype in HALF})
    if half:
        warnings.warn(f"the optimizer updates {'/'.join(half)} parameters in {'/'.join(half)}: updates smaller than "
                      f"~1/256 of a weight round away (lr 1e-6 changes nothing); use run.mixed_precision=bf16 for "
                      f"float32 master weights", stacklevel=2)


def check_supported(cfg: Config) -> None:
    """Optimizer plug-ins with their own loop (ES, Hyper-ES, …) take none of the gradient trainer's knobs
    (``LoopPlugin.gradient_knobs``)."""
    if cfg.optim.plugin_class().gradient_knobs:
        return
    o = cfg.optim
    set_knobs = [k for k, on in (("run.mixed_precision", cfg.run.mixed_precision != "no"),
                                 ("optim.mini_batches", o.mini_batches != 1),
                                 ("optim.old_logprobs", o.old_logprobs != "recompute"),
                                 ("model.gradient_checkpointing", cfg.model.gradient_checkpointing)) if on]
    if set_knobs:
        raise ConfigError(f"optim.name={o.name} trains with its own loop, which does not use {', '.join(set_knobs)}; "
                          f"unset them (they belong to the gradient trainer, optim.name=gradient)")
