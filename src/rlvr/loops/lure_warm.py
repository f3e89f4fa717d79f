"""A cache of LURE's warm-started weights (docs/methods.md §2.7), so the runs of one comparison seed that
start from the same warm start (LURE and its other-RL-seed control) make it once.

The key is everything the warm start depends on: the initial weights (bytes), the tokenizer's vocabulary,
the environments with their settings, and the warm start's steps, batch, learning rate and seed. A hit
loads the saved weights; a miss runs the warm start and saves them. Exact: the saved file holds the
weights bit for bit (safetensors), so a run from the cache equals a run that warmed up itself
(``tests/e2e/test_lure.py``). One process only: under data parallelism each rank warms up itself.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import torch

from rlvr.train.checkpoint import load_weights, make_temp_dir, save_weights


def warm_key(model: torch.nn.Module, tokenizer: Any, settings: dict[str, Any]) -> str:
    """A 16-hex-digit key of the initial weights, the vocabulary and ``settings`` (JSON-able)."""
    h = hashlib.blake2b(digest_size=8)
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(str(tensor.dtype).encode() + str(tuple(tensor.shape)).encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    h.update(json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode())
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return h.hexdigest()


def cached_warm_start(model: torch.nn.Module, tokenizer: Any, folder: str | Path, settings: dict[str, Any],
                      warm: Callable[[], Any]) -> bool:
    """Load the warm-started weights kept under ``folder`` for this model and ``settings``, or run
    ``warm()`` (which warm-starts ``model`` in place) and keep its result; True on a hit."""
    root = Path(folder)
    entry = root / warm_key(model, tokenizer, settings)
    if (entry / "model.safetensors").is_file():
        load_weights(entry, model)
        return True
    warm()
    entry.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(entry, ".saving-")  # concurrent writers each write their own, then one wins
    save_weights(tmp, model)
    os.replace(tmp / "model.safetensors", entry / "model.safetensors")
    tmp.rmdir()
    return False
