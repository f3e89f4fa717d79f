"""DeepSpeed ZeRO-2/3 through accelerate (``accelerate launch --config_file configs/accelerate/zero3.yaml``):
the ``rlvr.train.sharding`` backend for ``DistributedType.DEEPSPEED``, and what rlvr's update loop needs
from DeepSpeed.

- ``rlvr.train.sharding.make_accelerator`` builds the accelerator with ``cpu=False`` and the gloo backend
  on a machine without GPUs (``cpu=True`` would switch DeepSpeed off), so ZeRO runs on CPU processes.
- ``configure``: the DeepSpeed config rlvr's loop implies, set before ``prepare`` (there is no
  dataloader): ``train_micro_batch_size_per_gpu`` from ``optim.micro_batch_size``, one accumulation
  step in DeepSpeed's own count (rlvr marks the boundary itself, below), ``gradient_clipping`` from
  ``optim.grad_clip``.
- ``backward`` / ``step``: rlvr's micro-batch losses are already each micro-batch's share of the
  mini-batch's global loss, so they are back-propagated unscaled (``scale_wrt_gas=False``) with the
  accumulation boundary on the last micro-batch only (accelerate's own ``backward`` would step
  DeepSpeed's engine after every micro-batch); ``step`` is DeepSpeed's (clip, optimizer step, zero
  grad; it skips an update whose gradient norm is not finite) and returns its global gradient norm.
- ``DeepSpeedSharding``: ZeRO-2 keeps whole parameters on every rank (nothing to line up); ZeRO-3
  shards them, so each forward is a collective and rlvr runs in lock-step as under FSDP2
  (``sharded = True``); checkpoints gather the full weights one module at a time into the main
  process's host memory (``gathered_state``). ZeRO's optimizer state stays
  sharded: checkpoints hold none, and resume under DeepSpeed is refused.
- Generation under ZeRO-3 still gathers per forward (``gathered`` is the base class's: nothing held
  whole, lock-step kept, FSDP2 gathers once per generate call). ``GatheredParameters`` alone is not
  enough: ZeRO-3's forward hooks would release the parameters after each module's forward, and TRL
  removes and re-adds those hooks through DeepSpeed internals (``parameter_offload``) to avoid it.
  DeepSpeed is not installed here or in CI, so that path is left until it can be tested.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType

from rlvr.train.config import ConfigError
from rlvr.train.sharding import Sharding, register_backend


def active(acc: Accelerator) -> bool:
    return acc.distributed_type == DistributedType.DEEPSPEED


def zero_stage(acc: Accelerator) -> int:
    """The ZeRO stage of a DeepSpeed run; 0 when DeepSpeed is not in use."""
    return int(acc.state.deepspeed_plugin.zero_stage) if active(acc) else 0


def check_supported(acc: Accelerator, cfg: Any) -> None:
    """One-line errors for what this DeepSpeed path does not cover, before any work."""
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


class DeepSpeedSharding(Sharding):
    """DeepSpeed ZeRO-2 (gradients and AdamW state sharded) or ZeRO-3 (parameters too)."""

    def __init__(self, acc: Accelerator) -> None:
        super().__init__(acc)
        self.stage = zero_stage(acc)
        self.sharded = self.stage == 3
        # ZeRO-3: transformers builds the model inside deepspeed.zero.Init (each parameter partitioned as it
        # is created) and loads rank 0's values through GatheredParameters(modifier_rank=0): every rank calls
        self.loads_collectively = self.stage == 3

    @property
    def name(self) -> str:
        return f"zero{self.stage}"

    def backward(self, model: torch.nn.Module, loss: torch.Tensor, last: bool, scaler: Any = None) -> None:
        backward(model, loss, last)  # unscaled shares, the boundary on the last micro-batch

    def engine_step(self, model: torch.nn.Module) -> float:
        return step(model)  # DeepSpeed clips (gradient_clipping) and steps its sharded optimizer

    def model_state(self, module: torch.nn.Module, names: set[str] | None = None) -> dict[str, torch.Tensor]:
        """The full weights as host copies on the main process (ZeRO-3: gathered one module at a time,
        every rank calls; the other ranks get an empty dict, as under FSDP2)."""
        if not self.sharded:
            return super().model_state(module, names)
        from deepspeed.runtime.zero.partition_parameters import GatheredParameters
        return gathered_state(module, names, GatheredParameters, keep=self.acc.is_main_process)

    def optimizer_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        return None  # ZeRO's partitions; the checkpoint holds no optimizer state (resume is refused)

    def load_model_state(self, module: torch.nn.Module, weights: dict[str, torch.Tensor]) -> tuple[list, list]:
        raise ConfigError("loading weights into a DeepSpeed engine is not supported (resume under DeepSpeed)")

    def load_optimizer_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
                             state: dict[str, Any]) -> None:
        raise ConfigError("loading optimizer state into DeepSpeed is not supported (resume under DeepSpeed)")


def gathered_state(module: torch.nn.Module, names: set[str] | None, gather: Callable[[list], Any],
                   keep: bool) -> dict[str, torch.Tensor]:
    """``module.state_dict()`` (only ``names`` when given) as host copies, one module's own parameters
    gathered at a time: ``gather(params)`` (ZeRO-3's ``GatheredParameters``) holds them whole, their
    entries are copied to the host when ``keep`` (the main process), and leaving the context releases
    them before the next module's. Every rank must call (each gather is a collective); at most one
    module's parameters are whole at once, where gathering ``module.parameters()`` held the whole model."""
    entries = module.state_dict(keep_vars=True)
    owners: dict[str, list[str]] = {}  # owning module's name -> its state-dict keys, in state-dict order
    for key in entries:
        if names is None or key in names:
            owners.setdefault(key.rpartition(".")[0], []).append(key)
    state: dict[str, torch.Tensor] = {}
    for keys in owners.values():
        params = [entries[k] for k in keys if isinstance(entries[k], torch.nn.Parameter)]
        with gather(params) if params else nullcontext():  # buffers only: nothing to gather
            if keep:
                state.update({k: entries[k].detach().to("cpu", copy=True) for k in keys})
    return state


register_backend(DistributedType.DEEPSPEED, DeepSpeedSharding)
