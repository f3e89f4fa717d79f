"""A LoRA policy from config (``model.lora``) through ``peft``, and its adapter-disabled reference.

LoRA (Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", arXiv:2106.09685):
``W x + (alpha / r) · B A x`` with ``A (r, in)`` random, ``B (out, r)`` zero at the start, so the
wrapped policy starts equal to its base. Only ``A`` and ``B`` train; the base stays frozen, which
makes the base itself the KL / sampler reference: the same module with the adapter switched off
(``peft``'s ``disable_adapter()``), never a copy.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

from rlvr.models.lora_spec import LoraSpec


def add_lora(model: torch.nn.Module, spec: LoraSpec, seed: int = 0) -> torch.nn.Module:
    """``model`` wrapped by a fresh LoRA adapter (a ``PeftModelForCausalLM``); base weights frozen.
    ``seed`` draws the adapter's ``A`` without touching the caller's RNG."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as err:
        raise ValueError(f"model.lora needs the peft package (pip install 'rlvr[lora]'): {err}") from err
    targets: Any = "all-linear" if spec.target_modules == ("all-linear",) else list(spec.target_modules)
    config = LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout, target_modules=targets,
                        task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            return get_peft_model(model, config)
        except ValueError as err:  # e.g. a target module name the model does not have
            raise ValueError(f"model.lora: {err}") from err


def is_lora(model: torch.nn.Module) -> bool:
    """True for a ``peft`` model (possibly inside a DDP / accelerate wrapper)."""
    try:
        from peft import PeftModel
    except ImportError:  # no peft, no LoRA model
        return False
    return isinstance(getattr(model, "module", model), PeftModel)


def trainable_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter weights of a LoRA policy, by their ``state_dict`` names (what a checkpoint keeps)."""
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    return {k: v for k, v in model.state_dict().items() if k in names}


def base_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The frozen base weights of a LoRA policy, by their ``state_dict`` names."""
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    return {k: v for k, v in model.state_dict().items() if k not in names}


class AdapterDisabled(torch.nn.Module):
    """The base of a LoRA policy as a module of its own: every call runs with the adapter off.

    It shares every tensor with the policy (nothing is copied); attribute reads (``config``,
    ``generation_config``, ``get_output_embeddings``) go to the policy. Used as the trainer's frozen
    reference (KL term, anchor / prefix samplers)."""

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self.policy.disable_adapter():
            return self.policy(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with self.policy.disable_adapter():
            return self.policy.generate(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["policy"], name)

    def train(self, mode: bool = True) -> "AdapterDisabled":
        return self  # the policy's mode belongs to the trainer; the reference never flips it

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        """The reference's weights: the policy's frozen base (adapter tensors left out)."""
        return base_state_dict(self.policy)

    def load_state_dict(self, state: Any, strict: bool = True, assign: bool = False) -> Any:
        """Load base weights into the policy; only base tensors count as missing."""
        missing, unexpected = self.policy.load_state_dict(state, strict=False, assign=assign)
        base = set(base_state_dict(self.policy))
        result = torch.nn.modules.module._IncompatibleKeys([k for k in missing if k in base], unexpected)
        if strict and (result.missing_keys or result.unexpected_keys):
            raise RuntimeError(f"reference weights do not match the policy's base: {result}")
        return result


def reference_of(policy: torch.nn.Module) -> AdapterDisabled:
    """The adapter-disabled view of a LoRA ``policy`` (the frozen reference without a copy)."""
    return AdapterDisabled(policy)


MERGE_CHUNK = 1 << 20  # elements of float32 work per slice of a merged weight (4 MB)


def named_merged_weights(model: torch.nn.Module,
                         dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) in the base model's Hugging Face naming with the adapter merged in
    (``W + (alpha/r) B A``), each cast to ``dtype`` (None: the weight's own): what a weight sync to an
    engine sends. A stream: each merged weight is made when its turn comes, straight into one tensor of
    ``dtype`` (:func:`merged_weight`), so a consumer that keeps nothing holds at most one merged tensor
    and a slice of float32 work; an unadapted weight already in ``dtype`` is sent as it is (no copy)."""
    base = getattr(model, "module", model).get_base_model()
    adapted = {f"{name}.base_layer.weight": module for name, module in base.named_modules()
               if hasattr(module, "get_delta_weight") and module.active_adapters[0] in getattr(module, "lora_A", {})}
    for key, tensor in base.state_dict().items():
        if ".lora_" in key:
            continue
        module = adapted.get(key)  # no local keeps a sent tensor: the consumer's reference is the last one
        yield key.replace(".base_layer.", "."), (tensor.detach().to(dtype or tensor.dtype) if module is None
                                                 else merged_weight(module, dtype or tensor.dtype))


def merged_weight(module: torch.nn.Module, dtype: torch.dtype) -> torch.Tensor:
    """``W + s B A`` of one peft LoRA layer as a new tensor of ``dtype``. A plain LoRA ``Linear`` is
    merged a slice of rows at a time in float32 (or the adapter's wider dtype): ``(B[rows] @ A) * s + W[rows]``,
    peft's own operations in peft's order, so a float32 result equals ``W + get_delta_weight()`` and a
    narrower one is that value rounded once. Other layers (DoRA, embeddings, convolutions) take peft's
    ``get_delta_weight`` whole."""
    name = module.active_adapters[0]
    weight = module.base_layer.weight.detach()  # (out, in); (in, out) with fan_in_fan_out
    a, b = module.lora_A[name].weight.detach(), module.lora_B[name].weight.detach()  # (r, in), (out, r)
    if type(module).__name__ != "Linear" or module.use_dora.get(name) or weight.dim() != 2:
        return (weight + module.get_delta_weight(name).to(weight.dtype)).to(dtype)
    work = torch.promote_types(weight.dtype, b.dtype)
    a, b, scale = a.to(work), b.to(work), module.scaling[name]
    out = torch.empty(weight.shape, dtype=dtype, device=weight.device)
    step = max(1, MERGE_CHUNK // weight.shape[1])
    for start in range(0, weight.shape[0], step):
        rows = slice(start, start + step)
        if module.fan_in_fan_out:  # W stored transposed: its rows are columns of B A
            delta = (b @ a[:, rows]).T * scale  # (rows, out)
        else:
            delta = (b[rows] @ a) * scale  # (rows, in)
        out[rows] = delta.add_(weight[rows])
    return out
