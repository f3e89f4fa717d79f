"""A safetensors file written one tensor at a time, so a save holds at most one tensor's host copy.

``safetensors.torch.save_file`` takes every tensor at once and turns each into a ``bytes`` object before
writing: a save costs a second copy of everything it writes, on top of any clone the caller made (and a
checkpoint used to clone the weights and the AdamW state on the device first: +8 bytes per parameter on
a GPU). Here the header is built from shapes and dtypes alone, then each tensor is written straight from
its own memory (a CPU tensor that is already contiguous is not copied at all; a device tensor is copied
to the host one at a time). The file is an ordinary safetensors file: ``safetensors.torch.load_file``
and every other reader take it.

Format (safetensors' own): an unsigned 64-bit little-endian header length, a JSON header mapping each
name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets into the data that follows, which
the tensors cover without gaps) plus an optional ``"__metadata__"`` of strings, padded with spaces to a
multiple of 8 bytes; then the tensors' bytes. Tensors go in order of decreasing element size, so each
starts aligned to its own element size.
"""

from __future__ import annotations

import json
import struct
from typing import BinaryIO

import torch

_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
           torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
           torch.uint16: "U16", torch.uint32: "U32", torch.uint64: "U64"}


def save_file(tensors: dict[str, torch.Tensor], path: str, metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` to ``path`` as safetensors, streaming: see the module docstring. Raises
    ``ValueError`` naming a tensor whose dtype safetensors cannot hold."""
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name in order:
        t = tensors[name]
        if t.dtype not in _DTYPES:
            raise ValueError(f"tensor {name!r} has dtype {t.dtype}, which a safetensors file cannot hold")
        size = t.numel() * t.element_size()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in order:
            _write_tensor(f, tensors[name])


def _write_tensor(f: BinaryIO, tensor: torch.Tensor) -> None:
    """The tensor's bytes, row-major and little-endian: from its own memory where it is a contiguous CPU
    tensor, else from one host copy of it alone."""
    t = tensor.detach()
    if t.numel() == 0:
        return
    if t.device.type != "cpu":
        t = t.to("cpu")
    flat = t.contiguous().reshape(-1)  # a view where it is already contiguous
    f.write(memoryview(flat.view(torch.uint8).numpy()))
