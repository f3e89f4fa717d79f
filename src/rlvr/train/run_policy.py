"""The policy of a run folder or checkpoint folder, rebuilt from the run's config (``load_run_policy``)
or exported as a Hugging Face folder (``export_run``, ``rlvr export``: never over the run itself, and
never deleting a folder it did not write)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlvr.models.export import MARKER, export_policy
from rlvr.models.lora import add_lora, reference_of
from rlvr.train.build import build_model
from rlvr.train.checkpoint import CheckpointError, latest_checkpoint, load_weights, verify_checkpoint
from rlvr.train.config import load_config
from rlvr.train.run_dir import archive


def load_run_policy(path: str | Path, overrides: list[str] | None = None) -> tuple[torch.nn.Module, Any, Path]:
    """The policy of a run folder (its latest checkpoint) or of one checkpoint folder
    (``RUN/checkpoints/step_N``), rebuilt from the run's config.yaml (plus ``key=value`` overrides):
    base model, the base kept in RUN/reference for LoRA runs, adapter or full weights.
    Returns (model, tokenizer, checkpoint)."""
    run, ckpt = run_and_checkpoint(path)
    cfg = load_config(run / "config.yaml", overrides)
    model, tokenizer = build_model(cfg)
    if cfg.model.lora is not None:
        model = add_lora(model, cfg.model.lora, seed=cfg.run.training_seed)
        if (run / "reference" / "model.safetensors").is_file():  # a base model.path cannot rebuild
            load_weights(run / "reference", reference_of(model))
    load_weights(ckpt, model)
    return model.eval(), tokenizer, ckpt


def run_and_checkpoint(path: str | Path) -> tuple[Path, Path]:
    """(run folder, checkpoint) of a run folder (its latest intact checkpoint) or of a checkpoint folder
    named directly, which must match its manifest (``CheckpointError`` naming the damaged file)."""
    folder = Path(path)
    if (folder / "state.json").is_file():
        run, ckpt = folder.parent.parent, folder
        problem = verify_checkpoint(ckpt)
        if problem:
            raise CheckpointError(f"checkpoint {ckpt}: {problem}; export an intact one (the run folder "
                                  f"{run} picks its newest intact checkpoint)")
    elif (folder / "config.yaml").is_file():
        run, ckpt = folder, latest_checkpoint(folder)
        if ckpt is None:
            raise FileNotFoundError(f"run folder {folder} has no checkpoint")
    else:
        raise FileNotFoundError(f"{folder} is neither a run folder (config.yaml) nor a checkpoint folder "
                                f"(state.json)")
    if not (run / "config.yaml").is_file():
        raise FileNotFoundError(f"checkpoint {ckpt} is not inside a run folder with a config.yaml")
    return run, ckpt


def check_export_target(out: Path, run: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that is the run folder, holds it, or lies in its checkpoints; a non-empty ``out``
    that is not an earlier export is refused too, unless ``overwrite`` (then it is archived next to
    itself as ``OUT.archived-<time>``, never deleted)."""
    target, source = out.resolve(), run.resolve()
    if target == source or target in source.parents:
        raise ValueError(f"export: the output {out} is (or holds) the run folder {run}; choose another folder")
    if target.is_relative_to(source / "checkpoints"):
        raise ValueError(f"export: the output {out} is inside the checkpoints of {run}; choose another folder")
    if not out.exists() and not out.is_symlink():
        return
    if out.is_dir() and (not any(out.iterdir()) or (out / MARKER).is_file()):
        return  # empty, or an earlier export: replaced once the new one is complete
    if not overwrite:
        raise ValueError(f"export: {out} exists and is not an earlier rlvr export; choose another folder, or "
                         f"pass --overwrite to move it aside to {out.name}.archived-<time> first")
    archive(out, what="folder")


def export_run(path: str | Path, out: str | Path, overwrite: bool = False) -> dict[str, str]:
    """``rlvr export``: a run or checkpoint folder as a Hugging Face folder at ``out`` (see
    ``check_export_target`` for what ``out`` may be)."""
    run, _ = run_and_checkpoint(path)
    check_export_target(Path(out), run, overwrite)
    model, tokenizer, ckpt = load_run_policy(path)
    written = export_policy(model, tokenizer, out)
    result = {"checkpoint": str(ckpt), "model": str(written)}
    if (written / "adapter").is_dir():
        result["adapter"] = str(written / "adapter")
    return result
