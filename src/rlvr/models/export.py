"""Hugging Face outputs: a policy (or any run / checkpoint folder) as a ``save_pretrained`` folder.

``OUT/`` holds config.json, model.safetensors, generation_config.json and the tokenizer, so
``AutoModelForCausalLM`` / ``AutoTokenizer`` (and vLLM) load it with nothing from rlvr. For a LoRA
policy ``OUT/`` is the merged model (``W + (alpha/r) B A``) and ``OUT/adapter/`` the peft adapter alone.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from rlvr.models.lora import is_lora, reference_of

# transformers 5 writes "TokenizersBackend", a class older transformers (and so vLLM builds pinned to
# them) do not know; "PreTrainedTokenizerFast" is the same tokenizer.json-backed class under its
# portable name.
_PORTABLE_TOKENIZER = {"TokenizersBackend": "PreTrainedTokenizerFast"}


def export_policy(model: torch.nn.Module, tokenizer: Any, out: str | Path) -> Path:
    """Write ``model`` and ``tokenizer`` to ``out`` with ``save_pretrained`` (atomically: a folder
    already at ``out`` is replaced only once the new one is complete). Returns ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp_{out.name}_", dir=out.parent))
    try:
        inner = getattr(model, "module", model)
        if is_lora(inner):
            inner.save_pretrained(str(tmp / "adapter"))
            inner = copy.deepcopy(inner).merge_and_unload()
        inner.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        _portable_tokenizer_config(tmp / "tokenizer_config.json")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _portable_tokenizer_config(path: Path) -> None:
    if not path.is_file():
        return
    config = json.loads(path.read_text())
    if config.get("tokenizer_class") in _PORTABLE_TOKENIZER:
        config["tokenizer_class"] = _PORTABLE_TOKENIZER[config["tokenizer_class"]]
        path.write_text(json.dumps(config, indent=2, ensure_ascii=False))


def load_run_policy(path: str | Path, overrides: list[str] | None = None) -> tuple[torch.nn.Module, Any, Path]:
    """The policy of a run folder (its latest checkpoint) or of one checkpoint folder
    (``RUN/checkpoints/step_N``), rebuilt from the run's config.yaml (plus ``key=value`` overrides):
    base model, the base kept in RUN/reference for LoRA runs, adapter or full weights.
    Returns (model, tokenizer, checkpoint)."""
    from rlvr.train.build import build_model
    from rlvr.train.checkpoint import latest_checkpoint, load_weights
    from rlvr.train.config import load_config
    from rlvr.models.lora import add_lora
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
