"""Atomic, verified checkpoints: safetensors for tensors, JSON for the rest; no pickle.

Layout: ``RUN/checkpoints/step_000050/{model.safetensors, optimizer.safetensors, state.json,
manifest.json}`` (plus ``<name>.safetensors`` and ``<name>_optimizer.safetensors`` per extra trained
module, e.g. the critic) and ``RUN/checkpoints/latest`` naming the newest complete one.

The save sequence never removes a complete checkpoint before its replacement is complete: files
are written into a temporary folder, ``manifest.json`` (size and sha256 of every other file in the
folder, whatever they are) is written last, the folder is renamed into place (a previous save of
the same step is first renamed aside to ``step_N.old``, deleted only after), then ``latest`` moves,
then older checkpoints are pruned. Loading verifies the manifest; ``latest_checkpoint`` returns the
newest intact checkpoint, naming each one it skipped and why (see ``verify_checkpoint``).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from rlvr.files import write_atomic, write_text_atomic
from rlvr.notice import notice
from rlvr.train.tensor_file import save_file


Extra = dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]]  # name -> (module, its optimizer)
# What save_checkpoint takes for a model (or optimizer): the object itself, or its full state dict
# already gathered (a sharded run gathers it on every rank first: rlvr.train.sharding).
Weights = torch.nn.Module | dict[str, torch.Tensor]
OptimState = torch.optim.Optimizer | dict[str, Any]
MANIFEST = "manifest.json"
FORMAT = 2  # state.json["format"]: checkpoints from 2 on carry a manifest; older ones load unverified
_STEP_DIR = re.compile(r"step_(\d+)(\.old)?$")


class CheckpointError(RuntimeError):
    """No intact checkpoint to load (the message lists each one and why it was refused)."""


def save_checkpoint(run_dir: str | Path, step: int, model: Weights, optimizer: OptimState | None,
                    state: dict[str, Any], keep: int = 2, extras: dict[str, tuple[Weights, OptimState]] | None = None
                    ) -> Path:
    """Write checkpoint ``step`` atomically and point ``latest`` at it; keep the newest ``keep``.
    ``extras`` (e.g. ``{"critic": (value_model, its optimizer)}``) go into the same folder. Each model
    or optimizer may instead be its full state dict, gathered beforehand (sharded runs); an ``optimizer``
    of None (DeepSpeed ZeRO shards it) writes an empty optimizer file, which resume refuses."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = make_temp_dir(root, f".tmp_step_{step:06d}_")
    try:
        weights = model if isinstance(model, dict) else policy_state_dict(model)
        _save_file(_detached(weights), tmp / "model.safetensors")
        opt_tensors, opt_meta = _flatten_optimizer(optimizer) if optimizer is not None else ({}, None)
        _save_file(opt_tensors, tmp / "optimizer.safetensors")
        extra_meta = {}
        for name, (module, opt) in (extras or {}).items():
            _save_file(_detached(module if isinstance(module, dict) else module.state_dict()), tmp / f"{name}.safetensors")
            tensors, extra_meta[name] = _flatten_optimizer(opt)
            _save_file(tensors, tmp / f"{name}_optimizer.safetensors")
        _write_json(tmp / "state.json", {"step": step, "format": FORMAT, "optimizer": opt_meta,
                                         "extra_optimizers": extra_meta, **state})
        write_manifest(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _move_into_place(tmp, final)
    write_text_atomic(root / "latest", final.name, fsync=True)
    _prune(root, keep, final)
    return final


def make_temp_dir(parent: Path, prefix: str) -> Path:
    """A fresh folder in ``parent`` for a save that is renamed into place when complete, with the
    permissions of any folder made under the umask (``mkdtemp`` alone makes it 0700, private)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)
    return tmp


def _save_file(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """``save_file``; a full disk (or quota) becomes a one-line ``CheckpointError``."""
    try:
        save_file(tensors, str(path))
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise CheckpointError(f"could not write {path.name} in {path.parent}: {err.strerror} (is the disk full?); "
                              f"the checkpoints saved before are intact") from None


def _move_into_place(tmp: Path, final: Path) -> None:
    """Rename the complete ``tmp`` to ``final``; an existing ``final`` (the same step saved again) is
    renamed aside first and deleted only once the new one is in place."""
    aside = final.with_name(final.name + ".old")
    if final.exists():
        if aside.exists():
            shutil.rmtree(aside)
        os.replace(final, aside)
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    if aside.exists():
        shutil.rmtree(aside)


def save_weights(folder: str | Path, model: Weights) -> Path:
    """Write ``folder/model.safetensors`` atomically (e.g. a run's frozen reference policy; ``model``
    may be its full state dict, gathered beforehand)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    weights = _detached(model if isinstance(model, dict) else model.state_dict())
    write_atomic(folder / "model.safetensors", lambda tmp: _save_file(weights, tmp))
    return folder


def load_weights(folder: str | Path, model: torch.nn.Module, sharding: Any = None) -> None:
    """Load ``folder/model.safetensors`` into ``model`` (through ``sharding``'s loader when sharded)."""
    _load_model(Path(folder), model, sharding=sharding)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest intact checkpoint of a run (None when it has none): each newer one that fails
    ``verify_checkpoint`` is skipped with a notice naming it and why; when every one fails, a
    ``CheckpointError`` lists them all."""
    found = checkpoints(run_dir)
    skipped = []
    for path in found:
        problem = verify_checkpoint(path)
        if problem is None:
            return path
        skipped.append(f"{path.name}: {problem}")
        notice(f"skipping checkpoint {path}: {problem}")
    if skipped:
        raise CheckpointError(f"no intact checkpoint in {Path(run_dir) / 'checkpoints'}: " + "; ".join(skipped))
    return None


def checkpoints(run_dir: str | Path) -> list[Path]:
    """Checkpoint folders of a run, newest step first (a ``step_N.old`` after its ``step_N``)."""
    root = Path(run_dir) / "checkpoints"
    found = []
    for path in root.iterdir() if root.is_dir() else []:
        match = _STEP_DIR.match(path.name)
        if match and path.is_dir():
            found.append((-int(match.group(1)), bool(match.group(2)), path.name, path))
    return [path for *_, path in sorted(found)]


def verify_checkpoint(path: str | Path) -> str | None:
    """Why the checkpoint folder ``path`` cannot be loaded (a missing, truncated or altered file, an
    unreadable state.json or manifest), or None when it is intact."""
    path = Path(path)
    try:
        state = json.loads((path / "state.json").read_text())
    except FileNotFoundError:
        return "state.json is missing"
    except (ValueError, OSError) as err:
        return f"state.json is unreadable ({err})"
    if not isinstance(state, dict) or "step" not in state:
        return "state.json has no step"
    if state.get("format", 1) < FORMAT:
        return None  # written before manifests existed: nothing to verify against
    try:
        files = json.loads((path / MANIFEST).read_text())["files"]
    except FileNotFoundError:
        return f"{MANIFEST} is missing"
    except (ValueError, KeyError, TypeError, OSError) as err:
        return f"{MANIFEST} is unreadable ({err})"
    for name, want in sorted(files.items()):
        problem = _check_file(path / name, want)
        if problem:
            return f"{name} {problem}"
    return None


def _check_file(path: Path, want: dict) -> str | None:
    if not path.is_file():
        return "is missing"
    size = path.stat().st_size
    if size != want["size"]:
        return f"has {size} bytes, the manifest says {want['size']} (truncated or overwritten)"
    if _sha256(path) != want["sha256"]:
        return "does not match its sha256 in the manifest (corrupted)"
    return None


def write_manifest(folder: Path) -> None:
    """``folder/manifest.json``: size and sha256 of every other file under ``folder``."""
    files = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p, sync=True)}
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST}
    _write_json(folder / MANIFEST, {"files": files})


def _sha256(path: Path, sync: bool = False) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
        if sync:  # the manifest is written last: everything it vouches for is on disk first
            os.fsync(fh.fileno())
    return digest.hexdigest()


def _step_of(path: Path) -> int:
    return int(_STEP_DIR.match(path.name).group(1))  # type: ignore[union-attr]


def load_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                    extras: Extra | None = None, verify: bool = True, sharding: Any = None) -> dict:
    """Restore weights (and optimizer state, and every extra module with its optimizer) in place;
    return the JSON state. ``verify`` first checks the manifest (skip it only for a folder that
    ``latest_checkpoint`` has just verified). ``sharding`` (``rlvr.train.sharding.Sharding``) loads the
    full tensors into sharded parameters and optimizer state; every rank calls it then."""
    path = Path(path)
    problem = verify_checkpoint(path) if verify else None
    if problem:
        raise CheckpointError(f"checkpoint {path}: {problem}")
    _load_model(path, model, sharding=sharding)
    state = json.loads((path / "state.json").read_text())
    if optimizer is not None and state["optimizer"] is None:
        raise CheckpointError(f"checkpoint {path} holds no optimizer state (written under DeepSpeed ZeRO); it "
                              f"cannot be resumed exactly: start a new run from its weights")
    if optimizer is not None:
        _restore_optimizer(optimizer, _tensors(path / "optimizer.safetensors"), state["optimizer"], model, sharding)
    for name, (module, opt) in (extras or {}).items():
        if not (path / f"{name}.safetensors").exists():
            raise RuntimeError(f"checkpoint {path} has no '{name}' weights ({name}.safetensors); was it "
                               f"written by a run without one?")
        _load_model(path, module, f"{name}.safetensors", sharding)
        _restore_optimizer(opt, _tensors(path / f"{name}_optimizer.safetensors"),
                           state["extra_optimizers"][name], module, sharding)
    return state


def policy_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What a checkpoint keeps of the policy: a LoRA policy's adapter (its frozen base is rebuilt from
    ``model.path`` or kept once in RUN/reference), any other model's full state dict."""
    from rlvr.models.lora import is_lora, trainable_state_dict
    return trainable_state_dict(model) if is_lora(model) else model.state_dict()


def _load_model(path: Path, model: torch.nn.Module, filename: str = "model.safetensors", sharding: Any = None) -> None:
    weights = _tensors(path / filename)
    if sharding is None:
        missing, unexpected = model.load_state_dict(weights, strict=False)
    else:
        missing, unexpected = sharding.load_model_state(model, weights)
    state = policy_state_dict(model)
    loaded_ptrs = {_ptr(state[k]) for k in weights if k in state}
    shared = {k for k, v in state.items() if _ptr(v) in loaded_ptrs}  # tied to a loaded tensor
    if unexpected or (set(missing) & set(state)) - shared:
        raise RuntimeError(f"checkpoint {path} does not match the model: missing {missing}, unexpected {unexpected}")


def _tensors(file: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors; an unreadable one (e.g. a checkpoint from before manifests,
    truncated) is a one-line ``CheckpointError`` naming it."""
    try:
        return load_file(str(file))
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {file} is missing") from None
    except Exception as err:  # noqa: BLE001 — safetensors raises its own error types
        raise CheckpointError(f"checkpoint file {file} is unreadable ({err})") from None


def _ptr(tensor: torch.Tensor) -> int:
    """Storage address (of the local shard for a sharded DTensor parameter)."""
    return getattr(tensor, "_local_tensor", tensor).data_ptr()


def _detached(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors as they are, out of autograd: no copy. ``save_file`` (``rlvr.train.tensor_file``) writes
    them one at a time, copying to the host only a tensor that lives on a device, so a save never holds a
    clone of the model or of the optimizer state. Tied tensors are written under each name (the loader
    accepts either)."""
    return {k: v.detach() for k, v in weights.items()}


def _flatten_optimizer(optimizer: OptimState) -> tuple[dict[str, torch.Tensor], dict]:
    sd = optimizer if isinstance(optimizer, dict) else optimizer.state_dict()
    tensors, scalars = {}, {}
    for pid, pstate in sd["state"].items():
        for name, value in pstate.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{pid}.{name}"] = value.detach()
            else:
                scalars[f"{pid}.{name}"] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict,
                       module: torch.nn.Module | None = None, sharding: Any = None) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, value in list(tensors.items()) + list(meta["scalars"].items()):
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = value
    full = {"state": state, "param_groups": meta["param_groups"]}
    if sharding is None:
        optimizer.load_state_dict(full)
    else:
        sharding.load_optimizer_state(module, optimizer, full)


def _write_json(path: Path, data: Any) -> None:
    _write_file(path, json.dumps(data, indent=1, default=_jsonable))


def _write_file(path: Path, text: str) -> None:
    """Write and fsync, so a renamed folder never holds a file still only in the page cache."""
    with open(path, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. a platform without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"cannot store {type(obj).__name__} in a checkpoint's JSON")


def _prune(root: Path, keep: int, current: Path) -> None:
    """Delete all but the ``keep`` newest checkpoints up to ``current`` (which stays, with any newer
    ones), and temporary folders of interrupted saves."""
    step = _step_of(current)
    older = [p for p in checkpoints(root.parent) if _step_of(p) < step]
    for old in older[max(keep - 1, 0):] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".tmp_step_*"):
        shutil.rmtree(stale, ignore_errors=True)
