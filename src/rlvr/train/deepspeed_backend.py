"""DeepSpeed ZeRO-2/3 through accelerate (``accelerate launch --config_file configs/accelerate/zero3.yaml``).

What rlvr's loop needs from DeepSpeed, kept out of the trainer:

- ``make_accelerator``: on a machine without GPUs accelerate only goes multi-process with ``cpu=True``,
  which also switches DeepSpeed off; under DeepSpeed it is built with ``cpu=False`` and the gloo backend
  (DeepSpeed's CPU accelerator), so ZeRO runs on CPU processes too.
- ``configure``: the DeepSpeed config rlvr's loop implies, set before ``prepare`` (there is no
  dataloader): ``train_micro_batch_size_per_gpu`` from ``optim.micro_batch_size``, one accumulation
  step in DeepSpeed's own count (rlvr marks the boundary itself, below), ``gradient_clipping`` from
  ``optim.grad_clip``, and ZeRO-3 weights gathered for saving.
- ``backward`` / ``step``: rlvr's micro-batch losses are already each micro-batch's share of the
  mini-batch's global loss, so they are back-propagated unscaled (``scale_wrt_gas=False``) with the
  accumulation boundary on the last micro-batch only; ``step`` is DeepSpeed's (clip, optimizer step,
  zero grad) and returns its global gradient norm (before clipping).
- ``gathered``: under ZeRO-3 the parameters are gathered, and DeepSpeed's fetch/release hooks taken
  off, for the length of the block (generation, no-grad scoring, saving, evaluation): every rank may
  run a different number of forwards inside it. A no-op under ZeRO-2 (parameters are not sharded).
"""

from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from typing import Any, Iterator

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, InitProcessGroupKwargs


def requested() -> bool:
    """True when ``accelerate launch`` was given a DeepSpeed config (it sets ACCELERATE_USE_DEEPSPEED)."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def make_accelerator() -> Accelerator:
    """The run's accelerator: DDP (gloo on CPU) by default, DeepSpeed when the launch asked for it."""
    if not requested():
        return Accelerator(cpu=not torch.cuda.is_available())
    handlers = [] if torch.cuda.is_available() else [InitProcessGroupKwargs(backend="gloo")]
    return Accelerator(kwargs_handlers=handlers)


def active(acc: Accelerator) -> bool:
    return acc.distributed_type == DistributedType.DEEPSPEED


def zero_stage(acc: Accelerator) -> int:
    """The ZeRO stage of a DeepSpeed run; 0 when DeepSpeed is not in use."""
    return int(acc.state.deepspeed_plugin.zero_stage) if active(acc) else 0


def check_supported(acc: Accelerator, cfg: Any) -> None:
    """One-line errors for what this DeepSpeed path does not cover, before any work."""
    from rlvr.train.config import ConfigError
    if not active(acc):
        return
    if cfg.critic.enabled:
        raise ConfigError("critic.enabled=true is not supported under DeepSpeed (a second engine for the value "
                          "model); use DDP or FSDP2 for critic methods")
    if cfg.run.mixed_precision == "fp16":
        raise ConfigError("run.mixed_precision=fp16 is not supported under DeepSpeed here (rlvr's own loss "
                          "scaler); use bf16 or no")


def configure(acc: Accelerator, cfg: Any) -> None:
    """Fill the DeepSpeed config from rlvr's before ``prepare`` (no dataloader to infer it from)."""
    ds = acc.state.deepspeed_plugin.deepspeed_config
    micro = cfg.optim.micro_batch_size or cfg.rollout.group_size  # bookkeeping only: rlvr feeds the batches
    ds["train_micro_batch_size_per_gpu"] = micro
    ds["gradient_accumulation_steps"] = 1  # rlvr sets the boundary on each mini-batch's last micro-batch
    ds["train_batch_size"] = micro * acc.num_processes
    ds["gradient_clipping"] = float(cfg.optim.grad_clip)  # 0: no clipping, as in rlvr
    ds.setdefault("zero_optimization", {})["stage3_gather_16bit_weights_on_model_save"] = True
    acc.gradient_accumulation_steps = 1


def backward(engine: Any, loss: torch.Tensor, last: bool) -> None:
    """Accumulate one micro-batch's gradient; the reduction runs on the ``last`` one."""
    engine.set_gradient_accumulation_boundary(last)
    engine.backward(loss, scale_wrt_gas=False)


def step(engine: Any) -> float:
    """DeepSpeed's optimizer step (clipping inside); the global gradient norm before clipping."""
    engine.step()
    norm = engine.get_global_grad_norm()
    return float(norm) if norm is not None else 0.0


@contextmanager
def _zero3_gathered(engine: Any) -> Iterator[None]:
    """All parameters gathered, and every ZeRO-3 hook off for the block: the per-module fetch/release
    hooks (they would re-partition the weights after each forward) and the root module's
    start-of-forward hook, whose step check is a collective (a forward on one rank alone would wait for
    the others forever: evaluation on rank 0, or ranks decoding different numbers of tokens)."""
    from deepspeed.runtime.zero.partition_parameters import GatheredParameters
    offload = engine.optimizer.parameter_offload
    root_hooks = offload.module._forward_pre_hooks  # (torch keeps a module's pre-hooks by handle id)
    with GatheredParameters(list(engine.module.parameters())):
        for handle in offload.forward_hooks + offload.backward_hooks:
            handle.remove()
        offload.forward_hooks, offload.backward_hooks = [], []
        start_of_forward = root_hooks.pop(offload.fwd_pre_hook.id)
        try:
            yield
        finally:
            root_hooks[offload.fwd_pre_hook.id] = start_of_forward
            offload._register_deepspeed_module(offload.module)


def gathered(acc: Accelerator, model: Any) -> Any:
    """A context in which the policy's parameters are whole on every rank (a collective: every rank
    enters it); nothing to do outside ZeRO-3."""
    return _zero3_gathered(model) if zero_stage(acc) == 3 else nullcontext()


def whole_parameters(trainer: Any) -> Any:
    """``trainer.gathered()`` where the trainer has one (optimizer plug-ins' loops do not)."""
    return trainer.gathered() if hasattr(trainer, "gathered") else nullcontext()
