"""Where a collective's tensors must live, decided in one place.

A collective takes only tensors on a device its process group has a backend for: NCCL (accelerate's
plain group for DDP and DeepSpeed on CUDA) refuses a CPU tensor with "No backend type associated with
device type cpu", gloo takes CPU tensors. Every all-reduce, gather or broadcast of ``src/rlvr`` builds
(or moves) its tensor on ``collective_device`` and brings the result back to the host with ``.cpu()``,
``.item()`` or ``.tolist()`` where the caller wants host values.

* through an ``accelerate.Accelerator``: its ``device`` (the process's CUDA device under NCCL, the CPU
  under gloo);
* raw ``torch.distributed``: the device type the group's backend serves, the CPU where it serves the CPU
  (gloo, or a ``cpu:gloo,cuda:nccl`` pair), else the current device of that type (NCCL: the current
  CUDA device); the CPU when no group is initialized.
"""

from __future__ import annotations

from typing import Any

import torch

_HOST = ("cpu", "meta")  # device types without a "current" index


def collective_device(acc: Any = None, group: Any = None) -> torch.device:
    """The device the tensors of a collective must live on: ``acc.device`` with an Accelerator (or
    anything with a ``device``), else the one ``group``'s backend (default: the default group's) needs."""
    if acc is not None:
        return torch.device(acc.device)
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return torch.device("cpu")
    types = backend_device_types(str(dist.get_backend(group)))
    return torch.device("cpu") if "cpu" in types else current_device(types[0])


def backend_device_types(backend: str) -> list[str]:
    """The device types a backend string serves: ``"cpu:gloo,cuda:nccl"`` → ``["cpu", "cuda"]``; a bare
    name → those torch registers for it (``"nccl"`` → ``["cuda"]``), the CPU for an unknown one."""
    if ":" in backend:
        return [pair.split(":", 1)[0].strip() for pair in backend.split(",") if pair.strip()]
    import torch.distributed as dist
    registered = getattr(dist.Backend, "backend_capability", {})  # name → device types (torch ≥ 2.2)
    return list(registered.get(backend.lower(), ["cpu"]))


def current_device(device_type: str) -> torch.device:
    """``device_type`` with this process's current index (``cuda`` → ``cuda:<torch.cuda.current_device()>``)."""
    module = None if device_type in _HOST else getattr(torch, device_type, None)
    if module is None or not hasattr(module, "current_device"):
        return torch.device(device_type)
    return torch.device(device_type, module.current_device())
