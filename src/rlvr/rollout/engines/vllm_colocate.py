"""The colocated vLLM engine under several training ranks, and sleep mode (``rollout.engine: vllm``).

``distributed_executor_backend: external_launcher`` (TRL's colocate mode): every training process
(torchrun / accelerate) builds its own in-process ``vllm.LLM`` that joins the trainer's
torch.distributed world instead of spawning workers. Ranks are split into groups of
``tensor_parallel_size`` consecutive ranks; each group shards one engine (tensor parallel inside
the engine) and vLLM's data parallelism runs the groups side by side
(``data_parallel_size = world / tensor_parallel_size``). A tensor-parallel group must issue
identical requests, so its ranks gather their rows (prompt ids and per-row seeds) over vLLM's
tensor-parallel process group, generate them all, and each keeps its own slice: every rank still
gets completions for exactly its own prompts. Weight sync is unchanged: every rank pushes the full
weights into its shard (``load_weights`` keeps the rank's part).

Sleep mode (``sleep_level`` 1 or 2) releases the engine's memory while the trainer steps: once per
step, when the step's generation ends (the trainer's :func:`rlvr.rollout.engines.base.generation_phase`
around its collection: every micro-batch, refill round and sampler call of the step runs awake), the
engine sleeps (level 1: weights offloaded to CPU memory and the KV cache dropped; level 2: both
dropped) and it wakes at the next step's first engine call; after level 2 the weights are re-pushed
from the policy before the KV cache is re-allocated. A ``generate`` outside a phase sleeps after its
own call. vLLM offers this on CUDA (and ROCm,
XPU) only: its CPU platform rejects ``enable_sleep_mode`` and its CPU worker ignores ``sleep``.
"""

from __future__ import annotations

import os
from typing import Any

EXTERNAL_LAUNCHER = "external_launcher"


def world() -> tuple[int, int]:
    """(rank, world size) of the trainer's torch.distributed world, else of torchrun's env, else (0, 1)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def launcher_kwargs(backend: str, tensor_parallel_size: int, seed: int) -> dict[str, Any]:
    """``vllm.LLM`` keywords for ``backend`` ('' = vLLM's default: no keywords). With the external
    launcher, ``world / tensor_parallel_size`` engine replicas, one seed per tensor-parallel group."""
    if not backend:
        return {}
    rank, size = world()
    if size % tensor_parallel_size:
        raise ValueError(f"vllm: tensor_parallel_size {tensor_parallel_size} must divide the number of "
                         f"training processes ({size}) with distributed_executor_backend={backend}")
    return {"distributed_executor_backend": backend, "data_parallel_size": size // tensor_parallel_size,
            "seed": seed + rank // tensor_parallel_size}


def tensor_parallel_group() -> Any:
    """vLLM's tensor-parallel process group (CPU / gloo side) when it spans several ranks, else None."""
    from vllm.distributed.parallel_state import get_tp_group
    group = get_tp_group()
    return group.cpu_group if group.world_size > 1 else None


def gather_rows(rows: list[Any], group: Any) -> tuple[list[Any], slice]:
    """All ranks' ``rows`` of ``group`` in rank order, and the slice that holds this rank's."""
    import torch.distributed as dist
    if group is None:
        return rows, slice(0, len(rows))
    parts: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(parts, rows, group=group)
    start = sum(len(p) for p in parts[:dist.get_rank(group)])
    return [row for part in parts for row in part], slice(start, start + len(rows))


class SleepCycle:
    """Puts an engine's LLM to sleep after generating and wakes it before the next generate call."""

    def __init__(self, level: int) -> None:
        self.level = level
        self.asleep = False

    def sleep(self, llm: Any) -> None:
        if self.level and not self.asleep:
            llm.sleep(level=self.level)
            self.asleep = True

    def wake(self, llm: Any, reload_weights: Any) -> bool:
        """Wake ``llm``; with level 2, ``reload_weights()`` refills the weights before the KV cache
        returns. True when the weights were reloaded."""
        if not self.asleep:
            return False
        self.asleep = False
        if self.level == 2:
            llm.wake_up(tags=["weights"])
            reload_weights()
            llm.wake_up(tags=["kv_cache"])
            return True
        llm.wake_up()
        return False
