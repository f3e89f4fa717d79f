"""The data-parallel backend behind one small interface: what the trainer asks of one process, DDP
and FSDP2 (docs/design.md §6, "scale-out uses existing engines": ``accelerate`` does the wrapping).

``make_accelerator()`` builds the run's ``Accelerator`` (attaching accelerate's FSDP plug-in on CPU,
where accelerate 1.15 leaves it off); ``Sharding(acc)`` then answers, for any backend:

- ``name`` — ``single``, ``ddp`` or ``fsdp2``; ``sharded`` — parameters live in shards, so every
  forward is a collective and ranks must run the same forwards (``rlvr.rollout.lockstep``);
- ``lockstep()`` — a context for generation, evaluation, scoring and update passes: lock-step when
  sharded, nothing otherwise (scoring and update passes run the sharded module, one gather per forward);
- ``any_rank(flag)`` / ``max_over_ranks(n)`` — the two all-reduces lock-step needs;
- ``gathered(model)`` — one generate call's parameters held whole (``rlvr.rollout.lockstep.gathered``):
  FSDP2 unshards every ``FSDPModule`` once on entry (one all-gather per parameter group) and reshards
  once on exit, so decoding costs one gather per call instead of one per token and its forwards are
  local; the base class (one process, DDP, and DeepSpeed, see ``deepspeed_backend``) gathers nothing;
- ``clip_grad_norm(model, max_norm)`` — through ``accelerator.clip_grad_norm_`` (DTensor-aware), a
  plain scalar tensor on every rank, for the clip and the NaN guard;
- ``prepare_frozen(module)`` — the frozen reference (or any no-grad model) sharded like the policy;
- ``model_state(module, names)`` / ``optimizer_state(module, optimizer)`` — full, unsharded state
  dicts in the one-process format (every rank calls; the main process gets the tensors, the others
  may get empty dicts), so checkpoints and exports do not depend on the backend;
- ``load_model_state(module, weights)`` / ``load_optimizer_state(module, optimizer, state)`` — the
  reverse: full one-process state (read by every rank) into the local shards.

A new backend (DeepSpeed ZeRO) subclasses ``Sharding``, overriding what differs, and registers it
with ``register_backend(DistributedType.DEEPSPEED, ZeroSharding)``; ``Sharding(acc)`` then returns
it for that ``accelerator.distributed_type``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, InitProcessGroupKwargs

from rlvr.collectives import collective_device
from rlvr.rollout.lockstep import lockstep
from rlvr.train.config import ConfigError


def make_accelerator() -> Accelerator:
    """The run's accelerator (DeepSpeed: ``rlvr.train.deepspeed_backend``). ``accelerate launch`` with an FSDP config sets ``ACCELERATE_USE_FSDP``,
    but accelerate 1.15 attaches the FSDP plug-in only for GPU-like devices; on CPU (gloo) it would
    silently fall back to DDP, so the plug-in (read from the same ``FSDP_*`` variables) is attached here."""
    cpu = not torch.cuda.is_available()
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        # cpu=True would switch DeepSpeed off; without GPUs it runs on gloo (DeepSpeed's CPU accelerator)
        return Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend="gloo")] if cpu else [])
    acc = Accelerator(cpu=cpu)
    wants_fsdp = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    if wants_fsdp and acc.distributed_type == DistributedType.MULTI_CPU:
        from accelerate.state import PartialState
        from accelerate.utils import FullyShardedDataParallelPlugin
        plugin = FullyShardedDataParallelPlugin()  # FSDP_* environment variables from the config file
        if plugin.fsdp_version != 2:
            raise ConfigError("FSDP on CPU needs fsdp_version: 2 in the accelerate config "
                              "(see configs/accelerate/fsdp2_cpu.yaml)")
        # Both shared states: a later AcceleratorState() copies PartialState's type over its own.
        PartialState._shared_state["distributed_type"] = DistributedType.FSDP
        acc.state.distributed_type = DistributedType.FSDP
        acc.state.fsdp_plugin = plugin
    return acc


class Sharding:
    """One process or DDP: parameters are whole on every rank; nothing to gather or line up."""

    sharded = False
    # True where the model loader is itself a collective (every rank must call it), so rank 0 cannot load
    # alone and send (rlvr.train.shared_load): ZeRO-3, where transformers loads inside deepspeed.zero.Init.
    loads_collectively = False

    def __new__(cls, acc: Accelerator) -> Sharding:
        if cls is Sharding:
            cls = _backend(acc)
        return super().__new__(cls)

    def __init__(self, acc: Accelerator) -> None:
        self.acc = acc

    @property
    def name(self) -> str:
        return "ddp" if self.acc.num_processes > 1 else "single"

    @contextmanager
    def lockstep(self) -> Iterator[None]:
        """Generation, evaluation, scoring and update passes inside run in lock-step when sharded."""
        with lockstep(self if self.sharded else None):
            yield

    def any_rank(self, flag: bool) -> bool:
        if self.acc.num_processes == 1:
            return flag
        local = torch.tensor([float(flag)], device=collective_device(self.acc))  # (1,)
        return bool(self.acc.reduce(local, "sum").item() > 0)

    def max_over_ranks(self, n: int) -> int:
        if self.acc.num_processes == 1:
            return n
        counts = self.acc.gather(torch.tensor([n], device=collective_device(self.acc)))  # (world,)
        return int(counts.max().item())

    @contextmanager
    def gathered(self, model: torch.nn.Module) -> Iterator[bool]:
        """Parameters whole for one generate call: True when forwards inside are local (nothing to gather:
        they are whole already unless sharded), False when they stay collectives."""
        yield not self.sharded

    def backward(self, model: torch.nn.Module, loss: torch.Tensor, last: bool, scaler: Any = None) -> None:
        """One micro-batch's backward (``last``: the mini-batch's last, where gradients are reduced)."""
        self.acc.backward(loss if scaler is None else scaler.scale(loss))

    def engine_step(self, model: torch.nn.Module) -> float | None:
        """For a backend whose engine clips and steps the optimizer itself: do it and return the global
        gradient norm; None (here) when rlvr clips and steps (``clip_grad_norm``, then the optimizer)."""
        return None

    def clip_grad_norm(self, model: torch.nn.Module, max_norm: float) -> torch.Tensor:
        """Clip the gradients of ``model`` to ``max_norm`` (inf: measure only); the global norm."""
        params = [p for p in model.parameters() if p.grad is not None]
        total = self.acc.clip_grad_norm_(params, max_norm)
        return _full(total)

    def prepare_frozen(self, module: torch.nn.Module) -> torch.nn.Module:
        """A frozen model (the reference) on the run's device; sharded backends shard it too."""
        return module.to(self.acc.device)

    def model_state(self, module: torch.nn.Module, names: set[str] | None = None) -> dict[str, torch.Tensor]:
        """The full state dict (only ``names`` when given), as one process saves it."""
        state = module.state_dict()
        return state if names is None else {k: v for k, v in state.items() if k in names}

    def optimizer_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()

    def load_model_state(self, module: torch.nn.Module, weights: dict[str, torch.Tensor]) -> tuple[list, list]:
        """Load full ``weights`` (strict=False); (missing, unexpected) keys."""
        result = module.load_state_dict(weights, strict=False)
        return list(result.missing_keys), list(result.unexpected_keys)

    def load_optimizer_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
                             state: dict[str, Any]) -> None:
        optimizer.load_state_dict(state)


class FSDP2Sharding(Sharding):
    """FSDP2 (``torch.distributed.fsdp.fully_shard`` through accelerate, ``fsdp_version: 2``): each
    transformer block and the root hold 1/world of their parameters, gradients and AdamW state."""

    sharded = True
    name = "fsdp2"  # type: ignore[assignment]

    @contextmanager
    def gathered(self, model: torch.nn.Module) -> Iterator[bool]:
        """Every FSDP module of ``model`` unsharded once (one all-gather per parameter group) and kept whole
        through the forwards inside (no reshard after forward), then resharded once; forwards are local."""
        modules = _fsdp_modules(model)
        saved = [_keep_unsharded(m) for m in modules]
        try:
            for m in modules:
                m.unshard()
            yield True
        finally:
            for m, settings in zip(modules, saved, strict=True):
                _restore_reshard(m, settings)
                m.reshard()

    def prepare_frozen(self, module: torch.nn.Module) -> torch.nn.Module:
        from accelerate.utils.fsdp_utils import fsdp2_prepare_model
        return fsdp2_prepare_model(self.acc, module.to(self.acc.device))

    def model_state(self, module: torch.nn.Module, names: set[str] | None = None) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        full = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return full if names is None else {k: v for k, v in full.items() if k in names}

    def optimizer_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The full AdamW state keyed by parameter index (torch's own format), not by name."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
        full = get_optimizer_state_dict(module, _inner(optimizer),
                                        options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if not full:  # ranks other than the main process receive nothing
            return {}
        order = [name for group in full["param_groups"] for name in group["params"]]
        index = {name: i for i, name in enumerate(order)}
        groups, start = [], 0
        for group in full["param_groups"]:
            groups.append({**group, "params": list(range(start, start + len(group["params"])))})
            start += len(group["params"])
        return {"state": {index[k]: v for k, v in full["state"].items()}, "param_groups": groups}

    def load_model_state(self, module: torch.nn.Module, weights: dict[str, torch.Tensor]) -> tuple[list, list]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        from rlvr.models.lora import AdapterDisabled
        if isinstance(module, AdapterDisabled):  # a LoRA reference: the base weights, under the policy's names
            module = module.policy
        result = set_model_state_dict(module, weights, options=StateDictOptions(full_state_dict=True, strict=False))
        return list(result.missing_keys), list(result.unexpected_keys)

    def load_optimizer_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
                             state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
        names = _param_names(module, _inner(optimizer))  # index -> name, the optimizer's own order
        by_name = {"state": {names[int(i)]: v for i, v in state["state"].items()},
                   "param_groups": [{**g, "params": [names[int(i)] for i in g["params"]]}
                                    for g in state["param_groups"]]}
        set_optimizer_state_dict(module, _inner(optimizer), by_name,
                                 options=StateDictOptions(full_state_dict=True))


def _fsdp_modules(model: torch.nn.Module) -> list[Any]:
    """The FSDP2 modules in ``model``, outermost first, one per FSDP state (``fully_shard([a, b])``
    gives modules a state to share), with the root's lazy set-up done (its first forward would do it;
    ``unshard`` before any forward needs it)."""
    from torch.distributed.fsdp import FSDPModule
    by_state: dict[int, Any] = {}
    for m in model.modules():
        if isinstance(m, FSDPModule):
            by_state.setdefault(id(m._get_fsdp_state()), m)
    modules = list(by_state.values())
    if modules:
        modules[0]._get_fsdp_state()._lazy_init()  # a no-op once the root has run a forward
    return modules


def _keep_unsharded(module: Any) -> tuple[Any, list[Any]]:
    """Stop ``module`` resharding after each forward (not recursive); what to restore afterwards.
    torch 2.13's public ``set_reshard_after_forward`` cannot restore the root's own setting (None: kept
    whole), so the per-group settings are saved and put back as they were."""
    state = module._get_fsdp_state()
    saved = (state._auto_reshard_after_forward, [g.post_forward_mesh_info for g in state._fsdp_param_groups])
    module.set_reshard_after_forward(False, recurse=False)
    return saved


def _restore_reshard(module: Any, saved: tuple[Any, list[Any]]) -> None:
    state = module._get_fsdp_state()
    state._auto_reshard_after_forward, infos = saved
    for group, info in zip(state._fsdp_param_groups, infos, strict=True):
        group.post_forward_mesh_info = info


def _backend(acc: Accelerator) -> type[Sharding]:
    if acc.distributed_type == DistributedType.FSDP:
        plugin = acc.state.fsdp_plugin
        if getattr(plugin, "fsdp_version", 1) != 2:
            raise ConfigError("FSDP1 is not supported: set fsdp_version: 2 in the accelerate config "
                              "(configs/accelerate/fsdp2.yaml)")
        return FSDP2Sharding
    return _BACKENDS.get(acc.distributed_type, Sharding)


_BACKENDS: dict[Any, type[Sharding]] = {}  # DistributedType -> backend (FSDP is handled in _backend)


def register_backend(distributed_type: DistributedType, backend: type[Sharding]) -> None:
    """Use ``backend`` for accelerators of ``distributed_type`` (e.g. DeepSpeed ZeRO)."""
    _BACKENDS[distributed_type] = backend


def _full(value: Any) -> torch.Tensor:
    """A plain tensor from a possibly distributed (DTensor) scalar."""
    return value.full_tensor() if hasattr(value, "full_tensor") else value


def _inner(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The torch optimizer inside accelerate's ``AcceleratedOptimizer``."""
    return getattr(optimizer, "optimizer", optimizer)


def _param_names(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The names of the optimizer's parameters, in the order of its parameter groups."""
    name_of = {id(p): n for n, p in module.named_parameters()}
    return [name_of[id(p)] for group in optimizer.param_groups for p in group["params"]]


def finish_distributed() -> None:
    """End a data-parallel process cleanly: wait for every rank (rank 0 may still be writing RUN/final),
    then take the process group down, so no rank exits with gloo's threads still running (which can
    abort the process at interpreter exit). A no-op in one process; call it only on the success path
    (a rank that failed never reaches the barrier)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()

