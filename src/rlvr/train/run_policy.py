"""The policy of a run folder or checkpoint folder, rebuilt from the run's config (``load_run_policy``)
or exported as a Hugging Face folder (``export_run``, ``rlvr export``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlvr.models.export import export_policy
from rlvr.models.lora import add_lora, reference_of
from rlvr.train.build import build_model
from rlvr.train.checkpoint import latest_checkpoint, load_weights
from rlvr.train.config import load_config


def load_run_policy(path: str | Path, overrides: list[str] | None = None) -> tuple[torch.nn.Module, Any, Path]:
    """The policy of a run folder (its latest checkpoint) or of one checkpoint folder
    (``RUN/checkpoints/step_N``), rebuilt from the run's config.yaml (plus ``key=value`` overrides):
    base model, the base kept in RUN/reference for LoRA runs, adapter or full weights.
    Returns (model, tokenizer, checkpoint)."""
    folder = Path(path)
    if (folder / "state.json").is_file():
        run, ckpt = folder.parent.parent, folder
    elif (folder / "config.yaml").is_file():
        run, ckpt = folder, latest_checkpoint(folder)
        if ckpt is None:
            raise FileNotFoundError(f"run folder {folder} has no checkpoint")
    else:
        raise FileNotFoundError(f"{folder} is neither a run folder (config.yaml) nor a checkpoint folder "
                                f"(state.json)")
    if not (run / "config.yaml").is_file():
        raise FileNotFoundError(f"checkpoint {ckpt} is not inside a run folder with a config.yaml")
    cfg = load_config(run / "config.yaml", overrides)
    model, tokenizer = build_model(cfg)
    if cfg.model.lora is not None:
        model = add_lora(model, cfg.model.lora, seed=cfg.run.seed)
        if (run / "reference" / "model.safetensors").is_file():  # a base model.path cannot rebuild
            load_weights(run / "reference", reference_of(model))
    load_weights(ckpt, model)
    return model.eval(), tokenizer, ckpt


def export_run(path: str | Path, out: str | Path) -> dict[str, str]:
    """``rlvr export``: a run or checkpoint folder as a Hugging Face folder at ``out``."""
    model, tokenizer, ckpt = load_run_policy(path)
    written = export_policy(model, tokenizer, out)
    result = {"checkpoint": str(ckpt), "model": str(written)}
    if (written / "adapter").is_dir():
        result["adapter"] = str(written / "adapter")
    return result
