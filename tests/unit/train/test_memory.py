"""Resident memory (rlvr.train.memory, issue 46): oneDNN's per-shape caches are bounded from the command
line, and every step's metrics carry the process's resident memory and glibc's heap in use.

The growth check runs in fresh processes: both cache capacities are read once, at the first oneDNN
matrix product, so a process that already ran one (this one) cannot show the difference.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.train.loop import run_loop
from rlvr.train.memory import (KERNEL_CACHE_ENTRIES, KERNEL_CACHE_VARIABLES, bound_kernel_caches,
                               heap_in_use_mb, resident_mb)
from rlvr.train.logging import read_metrics
from tests.unit.train.test_loop import _loop

SHAPES = 150  # distinct input shapes, each one linear forward and backward in bfloat16 (3 products)
FILLED = 50  # by then a bounded cache (64 entries each) is full: 3 new entries per shape

# Heap in use (glibc mallinfo2) after FILLED and after SHAPES shapes; with CLI=1 the command line's
# entry point runs first (it bounds the caches before parsing its arguments).
GROWTH = """
import contextlib, io, json, os, sys
import torch, torch.nn.functional as F
from rlvr.train.memory import heap_in_use_mb  # reads glibc's count; bounds nothing by itself
if os.environ["CLI"] == "1":
    from rlvr.cli import main
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(["--help"])
torch.set_num_threads(1)
w = torch.randn(1536, 576, dtype=torch.bfloat16, requires_grad=True)
used = {}
for i in range(%(shapes)d):
    x = torch.randn(32 + i, 576, dtype=torch.bfloat16, requires_grad=True)
    F.linear(x, w).sum().backward()
    if i + 1 in (%(filled)d, %(shapes)d):
        used[i + 1] = heap_in_use_mb()
print(json.dumps({"growth_mb": used[%(shapes)d] - used[%(filled)d],
                  "set": {k: os.environ.get(k) for k in %(names)r}}))
""" % {"shapes": SHAPES, "filled": FILLED, "names": KERNEL_CACHE_VARIABLES}


def _has_mallinfo2() -> bool:
    return heap_in_use_mb() is not None


def _growth(cli: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_CACHE_VARIABLES}
    env.update(CLI="1" if cli else "0", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", GROWTH], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not _has_mallinfo2(), reason="needs glibc >= 2.33 (mallinfo2)")
def test_the_command_line_bounds_onednn_caches_so_new_shapes_stop_adding_memory():
    unbounded, bounded = _growth(cli=False), _growth(cli=True)
    assert bounded["set"] == {name: str(KERNEL_CACHE_ENTRIES) for name in KERNEL_CACHE_VARIABLES}
    # Once full, a bounded cache evicts an entry for each one it adds: at most a tenth of the unbounded
    # growth remains (167 MiB unbounded, 0.2 MiB bounded on an AMD EPYC). Where this processor's bf16
    # products keep no per-shape cache (oneDNN capped below AVX-512, as in `make test-other-rounding`)
    # neither run grows, and the bounded one must still stay within 1 MiB.
    assert bounded["growth_mb"] < max(unbounded["growth_mb"] / 10, 1.0), (bounded, unbounded)


def test_a_capacity_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv(KERNEL_CACHE_VARIABLES[0], "7")
    monkeypatch.delenv(KERNEL_CACHE_VARIABLES[1], raising=False)
    first, second = KERNEL_CACHE_VARIABLES
    assert bound_kernel_caches() == {first: "7", second: str(KERNEL_CACHE_ENTRIES)}
    assert os.environ[KERNEL_CACHE_VARIABLES[1]] == str(KERNEL_CACHE_ENTRIES)


def test_resident_memory_is_read_from_the_status_file(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmPeak:\t 9000 kB\nVmRSS:\t  204800 kB\nThreads:\t1\n")
    assert resident_mb(status) == 200.0
    assert resident_mb(tmp_path / "absent") is None
    status.write_text("Name:\tpython\n")
    assert resident_mb(status) is None


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no /proc (not Linux)")
def test_every_step_logs_resident_memory(tmp_path):
    loop, _, _ = _loop(tmp_path, ["run.steps=3"])
    run_loop(loop)
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["memory/rss_mb"] > 1 for r in rows)  # a Python process with torch loaded holds more than 1 MiB
    if _has_mallinfo2():
        assert all(0 < r["memory/heap_in_use_mb"] for r in rows)


FREED_HOLES = """
import sys
from rlvr.train.memory import release_free_pages, resident_mb
blocks = [bytearray(b"x" * 100_000) for _ in range(2000)]  # 200 MB of heap blocks (below mmap's threshold)
keep = bytearray(b"y" * 100_000)  # above them: the heap's top stays in use, so free() alone returns nothing
del blocks
before = resident_mb()
released = release_free_pages()
print(released, before - resident_mb())
"""


def test_free_heap_pages_go_back_to_the_kernel_before_an_update():
    """release_free_pages (called before each update) hands back pages malloc keeps after a free: 200 MB
    freed under a block still in use stay resident until then. In a fresh process (this one's heap is
    whatever earlier tests left)."""
    out = subprocess.run([sys.executable, "-c", FREED_HOLES], capture_output=True, text=True, check=True,
                         env={**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 20)})
    released, dropped = out.stdout.split()
    if released == "False":
        pytest.skip("the C library is not glibc: no malloc_trim")
    assert float(dropped) > 150, out.stdout  # MiB returned, of the 191 MiB freed


def test_pages_are_released_between_decoder_layers_only_in_training_passes():
    """pages_released_between_layers hooks every k-th decoder layer and the output layer while open: the
    training forward releases at layers 2 and 4 and after the output layer, just before the loss and its
    backward (3; checkpointing's recompute runs the layers' forward without their hooks), a no-grad pass
    never; the hooks are gone on exit (the lean decoder refuses hooked layers), and the gradients are the
    same bits as without it."""
    import torch

    from rlvr.models import build_char_tokenizer, build_tiny_model
    from rlvr.rollout.engines.lean import lean_refusal
    from rlvr.train.memory import pages_released_between_layers, release_free_pages, release_points

    if not release_free_pages():
        pytest.skip("the C library is not glibc: no malloc_trim")
    tok = build_char_tokenizer()
    ids = torch.randint(4, len(tok), (3, 12), generator=torch.Generator().manual_seed(0))

    def grads(release: bool) -> tuple[dict[str, torch.Tensor], int]:
        model = build_tiny_model(tok, hidden=32, layers=4, heads=4, seed=0)
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        assert len(release_points(model, every=2)) == 3  # layers 2 and 4, the output layer
        hooks, refusal = sum(len(m._forward_hooks) for m in model.modules()), lean_refusal(model)
        with pages_released_between_layers(model, every=2) if release else contextlib.nullcontext() as rel:
            with torch.no_grad():
                model(input_ids=ids)
            assert rel is None or rel.count == 0
            model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
        assert sum(len(m._forward_hooks) for m in model.modules()) == hooks and lean_refusal(model) == refusal
        return {k: p.grad for k, p in model.named_parameters()}, (rel.count if release else 0)

    plain, _ = grads(False)
    released, count = grads(True)
    assert count == 3
    assert all(torch.equal(plain[k], released[k]) for k in plain)
