"""Collectives get their tensors on the communication device (``rlvr.collectives``).

On CUDA, NCCL takes only CUDA tensors while ``torch.tensor(...)`` without ``device=`` lands on the CPU,
the default device; gloo tests on CPU cannot see the difference. These tests turn it around: the
default device is ``meta`` (``with torch.device("meta")``) and a fake group of two ranks serves the CPU
only, refusing any other tensor with NCCL's words. A site that builds its tensor without the
collective's device then hands the group a meta tensor and fails, as it would hand NCCL a CPU one.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from rlvr.collectives import backend_device_types, collective_device
from rlvr.optim.es import gather_rows
from rlvr.train.budget import budget_reason
from rlvr.train.callbacks import Callbacks
from rlvr.train.global_batch import sum_over_ranks
from rlvr.train.trainer import Trainer

CPU = torch.device("cpu")


def _refuse_off_device(t: torch.Tensor, device: torch.device) -> None:
    if t.device != device:  # NCCL's message for a CPU tensor
        raise RuntimeError(f"No backend type associated with device type {t.device.type}")


class CpuOnlyAccelerator:
    """Rank 0 of two whose group serves the CPU only; ``other`` is rank 1's tensor (values, any shape
    that reshapes to the local one)."""

    device, num_processes, process_index, is_main_process = CPU, 2, 0, True

    def __init__(self, other) -> None:
        self.other, self.calls = other, []

    def _both(self, t: torch.Tensor) -> torch.Tensor:
        _refuse_off_device(t, self.device)
        self.calls.append((tuple(t.shape), t.dtype))
        other = torch.as_tensor(self.other, dtype=t.dtype, device=self.device).reshape(t.shape)
        return torch.stack([t, other])  # (2, *shape)

    def reduce(self, t: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        both = self._both(t)
        return {"sum": both.sum(0), "mean": both.mean(0), "max": both.amax(0)}[reduction]

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        return torch.cat(list(self._both(t)))


# --- the helper ----------------------------------------------------------------------------------

def test_collective_device_is_the_accelerators():
    assert collective_device(SimpleNamespace(device="cuda:3")) == torch.device("cuda", 3)
    assert collective_device(SimpleNamespace(device=CPU)) == CPU


def test_collective_device_without_a_group_is_the_cpu(monkeypatch):
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    assert collective_device() == CPU


@pytest.mark.parametrize("backend, expected", [("gloo", CPU), ("cpu:gloo,cuda:nccl", CPU),
                                               ("cuda:nccl,cpu:gloo", CPU), ("nccl", torch.device("cuda", 1)),
                                               ("cuda:nccl", torch.device("cuda", 1))])
def test_collective_device_follows_the_default_groups_backend(monkeypatch, backend, expected):
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: backend)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert collective_device() == expected


def test_backend_device_types():
    assert backend_device_types("nccl") == ["cuda"]
    assert backend_device_types("cpu:gloo,cuda:nccl") == ["cpu", "cuda"]
    assert "cpu" in backend_device_types("gloo")
    assert backend_device_types("someone_elses") == ["cpu"]


# --- every site, against a group that refuses tensors off its device -----------------------------

def test_mean_over_ranks_reduces_on_the_collectives_device():
    acc = CpuOnlyAccelerator([3.0, 10.0])  # rank 1's values of (a, b)
    with torch.device("meta"):
        out = Trainer._mean_over_ranks(SimpleNamespace(acc=acc), {"b": 6.0, "a": 1.0})
    assert out == {"a": 2.0, "b": 8.0}
    assert acc.calls == [((2,), torch.float64)]


def test_seconds_budget_takes_the_slowest_rank_on_the_collectives_device():
    run = SimpleNamespace(steps=100, max_rollouts=0, max_seconds=60.0)
    with torch.device("meta"):
        assert budget_reason(run, 1, 0, 10.0, CpuOnlyAccelerator(75.0)) == "seconds"  # rank 1 is past it
        assert budget_reason(run, 1, 0, 10.0, CpuOnlyAccelerator(20.0)) is None


def test_sum_over_ranks_and_callbacks_reduce_on_the_collectives_device():
    stats = {"x": torch.tensor([1.0, 2.0]), "n": torch.tensor(3, dtype=torch.long)}  # built on the CPU
    acc = CpuOnlyAccelerator([1.0, 10.0, 20.0])  # rank 1's flat (n, x...)
    with torch.device("meta"):
        out = sum_over_ranks(acc, stats)
    assert out["n"].item() == 4 and out["x"].tolist() == [11.0, 22.0]

    class Stop:
        def on_step_end(self, trainer, step, metrics):
            return False  # this rank goes on; rank 1 asks to stop

    trainer = SimpleNamespace(acc=CpuOnlyAccelerator(1.0))
    with torch.device("meta"):
        assert Callbacks([Stop()]).step_end(trainer, 1, {}) is True


def _cpu_only_group(monkeypatch, other_width: int, other_rows: dict[int, list[float]]) -> list:
    """torch.distributed as rank 0 of two over a group serving the CPU only (gloo's device types)."""
    calls = []

    def all_reduce(t, op=dist.ReduceOp.SUM, group=None, async_op=False):
        _refuse_off_device(t, CPU)
        calls.append((tuple(t.shape), t.dtype))
        if op == dist.ReduceOp.MAX:
            t.clamp_(min=other_width)
        else:
            for k, row in other_rows.items():
                t[k] += torch.tensor(row, dtype=t.dtype, device=t.device)

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    return calls


def test_es_gather_rows_reduces_on_the_default_groups_device(monkeypatch):
    calls = _cpu_only_group(monkeypatch, other_width=2, other_rows={1: [0.5, 0.25]})
    local = {0: torch.tensor([1.0, 0.0], dtype=torch.float64), 2: torch.tensor([0.0, 1.0], dtype=torch.float64)}
    with torch.device("meta"):
        table = gather_rows(local, 3, world_size=2)  # rank 0 scored members 0 and 2, rank 1 member 1
    assert table.device == CPU
    assert table.tolist() == [[1.0, 0.0], [0.5, 0.25], [0.0, 1.0]]
    assert calls == [((1,), torch.int64), ((3, 2), torch.float64)]
