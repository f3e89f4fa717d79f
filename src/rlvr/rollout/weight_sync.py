"""Trainer → generator weight sync over a two-process gloo group opened beside the training world.

The group is built directly from a ``TCPStore`` and a ``ProcessGroupGloo`` on 127.0.0.1 (rank 0 the
trainer, rank 1 the generator), never through ``init_process_group``, so a run's default group (data
parallelism under ``torchrun`` / ``accelerate``) is untouched. Weights travel in buckets: the model's
tensors in ``state_dict`` order (tied tensors once), grouped by dtype into flat buffers of at most
``bucket_mb``, one broadcast per bucket. The sender flattens into fresh buffers (a snapshot), so it may
go on updating its weights while the broadcast is in flight (``send`` returns the pending works).

Both sides must hold the same architecture (the generator's model is a copy of the trainer's);
``layout`` checks it by the bucket shapes before the first sync.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor


@dataclass(frozen=True)
class Bucket:
    """Consecutive tensors of one dtype sent as one flat buffer."""

    dtype: torch.dtype
    numel: int
    indices: tuple[int, ...]  # positions in ``unique_tensors(model)``


def unique_tensors(model: torch.nn.Module) -> list[Tensor]:
    """The model's state tensors in ``state_dict`` order, each storage once (tied weights share one)."""
    seen, out = set(), []
    for tensor in model.state_dict(keep_vars=True).values():
        key = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))
        if key not in seen:
            seen.add(key)
            out.append(tensor)
    return out


def layout(tensors: list[Tensor], bucket_bytes: int) -> list[Bucket]:
    """Buckets of at most ``bucket_bytes`` (a larger tensor goes alone), one dtype each, in order."""
    buckets: list[Bucket] = []
    group: list[int] = []
    size, dtype = 0, None
    for i, t in enumerate(tensors):
        nbytes = t.numel() * t.element_size()
        if group and (t.dtype != dtype or size + nbytes > bucket_bytes):
            buckets.append(Bucket(dtype, sum(tensors[j].numel() for j in group), tuple(group)))
            group, size = [], 0
        group.append(i)
        size, dtype = size + nbytes, t.dtype
    if group:
        buckets.append(Bucket(dtype, sum(tensors[j].numel() for j in group), tuple(group)))
    return buckets


class WeightSync:
    """One side of the two-process sync group: ``send`` on the trainer (rank 0), ``receive`` on the
    generator (rank 1). ``WeightSync.store(port)`` opens the trainer's store before the generator
    starts; both sides then build the group (each call blocks until the other side joins)."""

    def __init__(self, store: dist.Store, rank: int, timeout_s: float, bucket_mb: float,
                 connect_s: float | None = None) -> None:
        if rank not in (0, 1):
            raise ValueError(f"WeightSync: rank must be 0 (trainer) or 1 (generator), got {rank}")
        opts = dist.ProcessGroupGloo._Options()  # connect_s: joining; timeout_s: each broadcast
        opts._timeout = datetime.timedelta(seconds=max(timeout_s, connect_s or 0.0))
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        self.group = dist.ProcessGroupGloo(dist.PrefixStore("rlvr_weight_sync", store), rank, 2, opts)
        self.rank, self.timeout = rank, datetime.timedelta(seconds=timeout_s)
        self.bucket_bytes = max(1, int(bucket_mb * 2**20))
        self._pending: list = []

    @staticmethod
    def store(port: int = 0, timeout_s: float = 300.0) -> dist.TCPStore:
        """The trainer's store on 127.0.0.1 (``port`` 0: a free one, read back as ``store.port``)."""
        return dist.TCPStore("127.0.0.1", port, 2, True, datetime.timedelta(seconds=timeout_s),
                             wait_for_workers=False)

    @staticmethod
    def client_store(port: int, timeout_s: float = 300.0) -> dist.TCPStore:
        """The generator's connection to the trainer's store."""
        return dist.TCPStore("127.0.0.1", port, 2, False, datetime.timedelta(seconds=timeout_s))

    def send(self, model: torch.nn.Module) -> int:
        """Broadcast ``model``'s weights (a snapshot) bucket by bucket; returns the bytes sent. The
        previous sync's broadcasts are waited for first; this one's finish in the background."""
        self.wait()
        tensors = unique_tensors(model)
        total = 0
        with torch.no_grad():
            for bucket in layout(tensors, self.bucket_bytes):
                flat = torch.cat([tensors[i].detach().reshape(-1).cpu() for i in bucket.indices])  # (numel,)
                self._pending.append((self.group.broadcast(flat, 0, self.timeout), flat))
                total += flat.numel() * flat.element_size()
        return total

    def wait(self) -> None:
        """Block until every broadcast of the last ``send`` has completed (an error past the timeout)."""
        pending, self._pending = self._pending, []
        for work, _flat in pending:
            work.wait(self.timeout)

    def receive(self, model: torch.nn.Module) -> int:
        """Receive the trainer's weights into ``model`` in place; returns the bytes received."""
        tensors = unique_tensors(model)
        total = 0
        with torch.no_grad():
            for bucket in layout(tensors, self.bucket_bytes):
                flat = torch.empty(bucket.numel, dtype=bucket.dtype, device="cpu")  # (numel,) the gloo group's device
                self.group.broadcast(flat, 0, self.timeout).wait(self.timeout)
                offset = 0
                for i in bucket.indices:
                    t = tensors[i]
                    t.copy_(flat[offset:offset + t.numel()].view(t.shape))
                    offset += t.numel()
                total += flat.numel() * flat.element_size()
        return total
