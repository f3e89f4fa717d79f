"""Frozen ``Linear`` weights held in the run's compute dtype (``run.mixed_precision``: bf16 or fp16).

Under autocast every ``Linear`` call rounds a float32 weight to the compute dtype before its matrix
product (``linear`` is on autocast's lower-precision list on CPU and CUDA). A frozen weight stored
already rounded is that same value, so the product, its output and the gradient that flows back
through it are bit for bit what the float32 weight gives, at half the bytes: the frozen base of a LoRA
policy and a full fine-tuning run's KL reference (verl and TRL hold both in bf16).

What is held: the weight and bias of every plain ``torch.nn.Linear`` whose parameters are all frozen
and used by ``Linear`` modules only. A weight tied to an embedding (a tied output head) stays float32:
the embedding lookup is not autocast, so its rows feed the residual stream as stored. Norms and
embeddings stay float32 for the same reason; trainable parameters (LoRA adapters, full fine-tuning's
master weights) are never touched.

Outside autocast (held-out evaluation, the asynchronous generator process) a :class:`HeldLinear` lifts
its weight to the input's dtype for the call, so every pass still runs; it then computes with the
rounded weight, which equals the checkpoint's own where the checkpoint was saved in the compute dtype
(SmolLM2 and most hub models ship bf16) and differs by that rounding (relative 2^-9 for bf16) where it
was float32. :func:`release_held` turns a module back into float32 ``Linear`` layers (before a merge
or an export that writes float32).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class HeldLinear(torch.nn.Linear):
    """A frozen ``Linear`` stored in a half dtype: as is under autocast (which would round a float32
    weight to the same values), lifted to the input's dtype for the call outside it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == self.weight.dtype or torch.is_autocast_enabled(x.device.type):
            return F.linear(x, self.weight, self.bias)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, self.weight.to(x.dtype), bias)


def held_candidates(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """The plain ``Linear`` modules of ``model`` whose parameters are all frozen floats used by
    ``Linear`` modules only (no tie to an embedding or any other kind of module)."""
    linear_only: dict[int, bool] = {}  # id(parameter) -> every module using it is a Linear
    for module in model.modules():
        is_linear = type(module) in (torch.nn.Linear, HeldLinear)
        for p in module.parameters(recurse=False):
            linear_only[id(p)] = linear_only.get(id(p), True) and is_linear
    found = []
    for module in model.modules():
        params = list(module.parameters(recurse=False))
        if type(module) is torch.nn.Linear and params and all(
                not p.requires_grad and p.is_floating_point() and linear_only[id(p)] for p in params):
            found.append(module)
    return found


def hold_frozen_linears(model: torch.nn.Module, dtype: torch.dtype) -> int:
    """Store every :func:`held_candidates` layer of ``model`` in ``dtype`` as a :class:`HeldLinear`
    (parameters cast in place: ties between ``Linear`` layers survive). Returns the bytes freed."""
    freed = 0
    for module in held_candidates(model):
        before = sum(p.numel() * p.element_size() for p in module.parameters(recurse=False))
        module.to(dtype)
        module.__class__ = HeldLinear
        freed += before - sum(p.numel() * p.element_size() for p in module.parameters(recurse=False))
    return freed


def release_held(model: torch.nn.Module, dtype: torch.dtype = torch.float32) -> None:
    """Every :class:`HeldLinear` of ``model`` back to a plain ``Linear`` in ``dtype`` (values unchanged:
    a half value is exact in float32)."""
    for module in model.modules():
        if type(module) is HeldLinear:
            module.to(dtype)
            module.__class__ = torch.nn.Linear
