"""The policy's checkpoint read once per run, not once per process.

In a data-parallel or sharded run (DDP, FSDP2, DeepSpeed ZeRO-2) only the main process (global rank 0)
reads ``model.path``. It sends the others a small manifest (the model's class and config, its
generation config, and the name, shape and dtype of every distinct parameter and buffer); each other
rank builds that architecture on the meta device (no memory, no weight file opened), then receives rank
0's tensors one at a time, each materialised as it arrives. Every rank then holds exactly rank 0's
weights before anything copies the model (the critic's backbone, a LoRA adapter's base, the KL
reference), so all of them agree on every rank by construction, whatever the backend does afterwards.
Under ZeRO-3 the loader is itself a collective (transformers loads inside ``deepspeed.zero.Init``), so
the Trainer does not call this there (``Sharding.loads_collectively``).

What it saves: ranks other than 0 never open the checkpoint (one read of the files instead of one per
process, for network filesystems and several nodes). Not memory on one machine: each rank still holds
one whole copy of the model until the backend shards it (FSDP2's ``fully_shard``), as before, and ranks
that each loaded memory-mapped safetensors shared the page cache (docs/scaling.md gives the
measurement). Non-persistent buffers (rotary ``inv_freq``) are sent too. Tied weights stay tied (one
tensor per distinct parameter, set at every name that shares it). Collectives run on
``rlvr.collectives.collective_device`` (the GPU under NCCL: each tensor goes there for the broadcast and
back to the host).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from rlvr.collectives import collective_device


def load_shared(acc: Any, load: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """``load()`` on the main process; the others receive its result (one process: ``load()``). Every
    rank leaves with the main process's CPU random state after ``load()``, as when each rank loaded.
    A ``load()`` that fails on the main process fails every rank (none is left waiting for weights)."""
    if acc.num_processes == 1:
        return load()
    import torch.distributed as dist
    model, failure = None, None
    if acc.is_main_process:
        try:
            model = load()
        except Exception as err:  # told to the other ranks, then raised here
            failure = err
    box = [None if not acc.is_main_process else {"error": f"{type(failure).__name__}: {failure}"}
           if failure is not None else {**manifest(model), "rng": bytes(torch.get_rng_state().tolist())}]
    dist.broadcast_object_list(box, src=0)
    spec = box[0]
    if failure is not None:
        raise failure
    if "error" in spec:
        raise RuntimeError(f"the main process could not load model.path: {spec['error']}")
    if model is None:
        with torch.random.fork_rng(devices=[]):
            model = skeleton(spec)
        torch.set_rng_state(torch.tensor(list(spec["rng"]), dtype=torch.uint8))
    receive(model, spec, collective_device(acc), sender=acc.is_main_process)
    return model


def distinct_tensors(model: torch.nn.Module) -> dict[str, tuple[torch.Tensor, bool]]:
    """name -> (tensor, is_parameter): each distinct parameter under its first name (tied ones once),
    then every buffer under each of its names (non-persistent ones too)."""
    out = {name: (p, True) for name, p in model.named_parameters()}
    out.update({name: (b, False) for name, b in model.named_buffers(remove_duplicate=False)})
    return out


def manifest(model: torch.nn.Module) -> dict[str, Any]:
    """What another rank needs to build ``model``'s skeleton and receive its tensors (no tensor data)."""
    tensors = [(name, tuple(t.shape), t.dtype, t.device.type, is_param, is_param and t.requires_grad)
               for name, (t, is_param) in distinct_tensors(model).items()]
    return {"cls": type(model), "config": model.config, "training": model.training,
            "generation_config": getattr(model, "generation_config", None), "tensors": tensors}


def skeleton(spec: dict[str, Any]) -> torch.nn.Module:
    """The main process's architecture on the meta device (built from its config, nothing read)."""
    config = copy.deepcopy(spec["config"])
    with torch.device("meta"):
        model = spec["cls"]._from_config(config)  # the config's dtype and attention implementation
    if spec["generation_config"] is not None:
        model.generation_config = copy.deepcopy(spec["generation_config"])
    mine, theirs = list(distinct_tensors(model)), [t[0] for t in spec["tensors"]]
    if mine != theirs:
        missing, extra = sorted(set(theirs) - set(mine))[:5], sorted(set(mine) - set(theirs))[:5]
        raise RuntimeError(f"the model built from the main process's config differs from the one it loaded "
                           f"(missing {missing}, extra {extra}); every rank must run the same transformers")
    return model.train(spec["training"])


def receive(model: torch.nn.Module, spec: dict[str, Any], device: torch.device, sender: bool) -> None:
    """Broadcast every tensor of the manifest from rank 0, in its order; a receiver materialises each
    one as it arrives and puts it in place (a parameter at every name that shares it: ties stay)."""
    import torch.distributed as dist
    held = distinct_tensors(model)
    places = _parameter_places(model) if not sender else {}
    for name, shape, dtype, home, is_param, trainable in spec["tensors"]:
        if sender:
            dist.broadcast(held[name][0].detach().to(device).contiguous(), src=0)
            continue
        arrived = torch.empty(shape, dtype=dtype, device=device)
        dist.broadcast(arrived, src=0)
        value = arrived.to(home)
        if is_param:
            param = torch.nn.Parameter(value, requires_grad=trainable)
            for module, leaf in places[id(held[name][0])]:
                module._parameters[leaf] = param
        else:
            owner, _, leaf = name.rpartition(".")
            model.get_submodule(owner)._buffers[leaf] = value


def _parameter_places(model: torch.nn.Module) -> dict[int, list[tuple[torch.nn.Module, str]]]:
    """id(parameter) -> every (module, attribute) that holds it."""
    out: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for module in model.modules():
        for leaf, p in module._parameters.items():
            if p is not None:
                out.setdefault(id(p), []).append((module, leaf))
    return out
