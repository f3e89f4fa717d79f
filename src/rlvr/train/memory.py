"""Resident memory of the training process, a bound on oneDNN's per-shape caches (issue 46), and
handing malloc's free pages back before each update.

On CPU, PyTorch runs matrix products (every bfloat16 one under autocast, some float32 ones) through
oneDNN. Two caches keep what was built for each new input shape: oneDNN's own primitive cache
(``ONEDNN_PRIMITIVE_CACHE_CAPACITY``) and ideep's (``LRU_CACHE_CAPACITY``), 1024 entries each by default.
An RL step's shapes change with every batch's prompt and completion lengths (padded rows, packed rows,
rows leaving the decode batch), so nearly every step adds entries, each up to a few MiB on a real
model: resident memory climbs step after step until both caches hold 1024 entries. A step reuses a few
dozen shapes (the same products in every layer, forward and backward), so ``KERNEL_CACHE_ENTRIES``
keeps those and bounds the rest. Measured in benchmarks/train_memory.py.

glibc's malloc keeps the pages of freed blocks. A step frees what its rollout held (KV caches, logits,
decoder copies of the weights) and then asks for the update's activations in blocks of other sizes, so
the freed pages are not reused and the heap grows around them: on SmolLM2 with whole 64-row batches the
resident set rose from 2.9 to 5.9 GB over 4 steps while malloc's blocks in use stayed at 1.7 GB.
``release_free_pages`` (``malloc_trim(0)``: free pages returned to the kernel, blocks in use untouched)
runs before each update, so the update's peak is what it uses, not what earlier steps left behind.

Inside the update the same happens on a smaller scale: each decoder layer's forward frees temporaries
(float32 norms, casts, the recomputed elementwise ops) between the activations it keeps, and the heap
keeps their pages. On SmolLM2 with whole 64-row batches the resident set at the end of the forward was
4.8 GB while 3.3 GB were in use. ``pages_released_between_layers`` returns free pages after every
``RELEASE_EVERY_LAYERS``-th decoder layer of the update's forward passes and after the output layer, so
the backward starts from a trimmed heap: the peak fell from 5.9 to 4.8 GB at the same step time (2-core AMD EPYC,
benchmarks/step_speed.py, docs/training-real-models.md). A lower mmap threshold frees the same pages
but costs a page fault per reuse: the forward and backward took 16 s instead of 9.

Both variables are read once, when the process first uses oneDNN: ``bound_kernel_caches`` must run
before the first matrix product (the trainer calls it before loading the model) and leaves a value
the user set alone.
"""

from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:  # torch is imported where it is used: `rlvr --help` and `rlvr list` import this file
    import torch

KERNEL_CACHE_ENTRIES = 64  # per cache; ideep crashes with 0
KERNEL_CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
RELEASE_EVERY_LAYERS = 10  # decoder layers between two page releases in an update's pass (SmolLM2's 30: 3)
STATUS = Path("/proc/self/status")


def bound_kernel_caches(entries: int = KERNEL_CACHE_ENTRIES) -> dict[str, str]:
    """Set both cache capacities to ``entries`` unless already set; returns the values in force."""
    return {name: os.environ.setdefault(name, str(entries)) for name in KERNEL_CACHE_VARIABLES}


def resident_mb(status: Path = STATUS) -> float | None:
    """This process's resident set (VmRSS) in MiB, or None where the kernel does not report it."""
    try:
        text = status.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024  # reported in kB
    return None


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


@lru_cache(maxsize=None)
def _glibc(name: str) -> Any:
    """glibc's function ``name``, or None where the C library is not glibc or lacks it."""
    try:
        return getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None


@lru_cache(maxsize=1)
def _mallinfo2() -> Any:
    """glibc's ``mallinfo2`` (glibc >= 2.33), or None."""
    fn = _glibc("mallinfo2")
    if fn is not None:
        fn.restype = _MallInfo2
    return fn


def release_free_pages() -> bool:
    """Return malloc's free pages to the kernel (glibc ``malloc_trim(0)``); numbers and tensors are
    untouched. False where the C library has no ``malloc_trim`` (not glibc)."""
    fn = _glibc("malloc_trim")
    if fn is None:
        return False
    fn(0)
    return True


def heap_in_use_mb() -> float | None:
    """MiB of malloc's heap in use (mmap'd blocks included), or None where not glibc >= 2.33. Unlike the
    resident set it does not count freed pages the heap keeps, so it shows growth that RSS hides."""
    fn = _mallinfo2()
    if fn is None:
        return None
    info = fn()
    return (info.uordblks + info.hblkhd) / 2**20


def step_memory() -> dict[str, float]:
    """A step's memory metrics: ``memory/rss_mb`` and ``memory/heap_in_use_mb`` (each absent where this
    system does not report it)."""
    values = {"memory/rss_mb": resident_mb(), "memory/heap_in_use_mb": heap_in_use_mb()}
    return {name: round(v, 1) for name, v in values.items() if v is not None}


class Releases:
    """How many times :func:`pages_released_between_layers` returned free pages (the test counts them)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, module: torch.nn.Module, args: Any, output: Any) -> None:  # a forward hook
        import torch
        if torch.is_grad_enabled() and release_free_pages():  # training forwards only, not no-grad scoring
            self.count += 1


def release_points(model: torch.nn.Module, every: int = RELEASE_EVERY_LAYERS) -> list[torch.nn.Module]:
    """Every ``every``-th decoder layer of ``model`` (``model.layers`` of the transformers model under any
    wrapper) and its output layer; empty where it has neither."""
    from rlvr.rollout.scoring import innermost  # transformers: not at `rlvr` start-up (cli imports this file)
    base = innermost(model)
    layers = list(getattr(getattr(base, "model", None), "layers", None) or [])
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    return [*layers[every - 1::every], *([head] if head is not None else [])]


@contextmanager
def pages_released_between_layers(model: torch.nn.Module, every: int = RELEASE_EVERY_LAYERS) -> Iterator[Releases]:
    """While open, free heap pages go back to the kernel after each grad-enabled forward call of
    :func:`release_points` (``malloc_trim(0)``: numbers and tensors untouched; checkpointing's recompute
    runs the layers without their hooks). The hooks are removed on exit, so generation never sees them
    (the lean decoder refuses hooked layers)."""
    releases = Releases()
    handles = [m.register_forward_hook(releases) for m in release_points(model, every)]
    try:
        yield releases
    finally:
        for handle in handles:
            handle.remove()
