"""Atomic checkpoints: safetensors for tensors, JSON for the rest; no pickle.

Layout: ``RUN/checkpoints/step_000050/{model.safetensors, optimizer.safetensors, state.json}`` (plus
``<name>.safetensors`` and ``<name>_optimizer.safetensors`` per extra trained module, e.g. the critic) and
``RUN/checkpoints/latest`` naming the newest complete one. A checkpoint is written into a
temporary folder and renamed into place, so a crash mid-write never leaves a half checkpoint and
never touches the previous one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file


Extra = dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]]  # name -> (module, its optimizer)


def save_checkpoint(run_dir: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    state: dict[str, Any], keep: int = 2, extras: Extra | None = None) -> Path:
    """Write checkpoint ``step`` atomically and point ``latest`` at it; keep the newest ``keep``.
    ``extras`` (e.g. ``{"critic": (value_model, its optimizer)}``) go into the same folder."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp_step_{step:06d}_", dir=root))
    try:
        weights = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
        save_file(_untie(weights), str(tmp / "model.safetensors"))
        opt_tensors, opt_meta = _flatten_optimizer(optimizer)
        save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
        extra_meta = {}
        for name, (module, opt) in (extras or {}).items():
            save_file(_untie({k: v.detach().contiguous().clone() for k, v in module.state_dict().items()}),
                      str(tmp / f"{name}.safetensors"))
            tensors, extra_meta[name] = _flatten_optimizer(opt)
            save_file(tensors, str(tmp / f"{name}_optimizer.safetensors"))
        _write_json(tmp / "state.json", {"step": step, "optimizer": opt_meta, "extra_optimizers": extra_meta,
                                         **state})
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _write_text_atomic(root / "latest", final.name)
    _prune(root, keep)
    return final


def save_weights(folder: str | Path, model: torch.nn.Module) -> Path:
    """Write ``folder/model.safetensors`` atomically (e.g. a run's frozen reference policy)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "model.safetensors.tmp"
    weights = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(_untie(weights), str(tmp))
    os.replace(tmp, folder / "model.safetensors")
    return folder


def load_weights(folder: str | Path, model: torch.nn.Module) -> None:
    _load_model(Path(folder), model)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = pointer.parent / pointer.read_text().strip()
    return path if (path / "state.json").exists() else None


def load_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                    extras: Extra | None = None) -> dict:
    """Restore weights (and optimizer state, and every extra module with its optimizer) in place;
    return the JSON state."""
    path = Path(path)
    _load_model(path, model)
    state = json.loads((path / "state.json").read_text())
    if optimizer is not None:
        _restore_optimizer(optimizer, load_file(str(path / "optimizer.safetensors")), state["optimizer"])
    for name, (module, opt) in (extras or {}).items():
        if not (path / f"{name}.safetensors").exists():
            raise RuntimeError(f"checkpoint {path} has no '{name}' weights ({name}.safetensors); was it "
                               f"written by a run without one?")
        _load_model(path, module, f"{name}.safetensors")
        _restore_optimizer(opt, load_file(str(path / f"{name}_optimizer.safetensors")),
                           state["extra_optimizers"][name])
    return state


def _load_model(path: Path, model: torch.nn.Module, filename: str = "model.safetensors") -> None:
    weights = load_file(str(path / filename))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    state = model.state_dict()
    loaded_ptrs = {state[k].data_ptr() for k in weights if k in state}
    shared = {k for k, v in state.items() if v.data_ptr() in loaded_ptrs}  # tied to a loaded tensor
    if unexpected or set(missing) - shared:
        raise RuntimeError(f"checkpoint {path} does not match the model: missing {missing}, unexpected {unexpected}")


def _untie(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses shared storage; tied embeddings are stored once, re-tied on load."""
    seen: dict[int, str] = {}
    out = {}
    for key, value in weights.items():
        ptr = value.data_ptr()
        if ptr in seen:
            continue
        seen[ptr] = key
        out[key] = value
    return out


def _flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for pid, pstate in sd["state"].items():
        for name, value in pstate.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{pid}.{name}"] = value.detach().contiguous().clone()
            else:
                scalars[f"{pid}.{name}"] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, value in list(tensors.items()) + list(meta["scalars"].items()):
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, default=_jsonable))


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"cannot store {type(obj).__name__} in a checkpoint's JSON")


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _prune(root: Path, keep: int) -> None:
    done = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in done[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".tmp_step_*"):
        shutil.rmtree(stale, ignore_errors=True)
