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

from rlvr.models.held import release_held
from rlvr.models.lora import is_lora, reference_of

# transformers 5 writes "TokenizersBackend", a class older transformers (and so vLLM builds pinned to
# them) do not know; "PreTrainedTokenizerFast" is the same tokenizer.json-backed class under its
# portable name.
_PORTABLE_TOKENIZER = {"TokenizersBackend": "PreTrainedTokenizerFast"}
# Written into every export: a folder holding it is one rlvr wrote, so a new export may replace it.
MARKER = "rlvr_export.json"


def export_policy(model: torch.nn.Module, tokenizer: Any, out: str | Path) -> Path:
    """Write ``model`` and ``tokenizer`` to ``out`` with ``save_pretrained`` (atomically: a folder
    already at ``out`` is replaced only once the new one is complete). Returns ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp_{out.name}_", dir=out.parent))
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)  # mkdtemp's 0700 would make the export private
    try:
        inner = getattr(model, "module", model)
        lora = is_lora(inner)
        if lora:
            inner.save_pretrained(str(tmp / "adapter"))
            inner = copy.deepcopy(inner)
            release_held(inner)  # a base held in bf16 (run.mixed_precision) merges and saves as float32
            inner = inner.merge_and_unload()
        inner.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        _portable_tokenizer_config(tmp / "tokenizer_config.json")
        (tmp / MARKER).write_text(json.dumps({"written_by": "rlvr", "merged_lora": lora}))
        aside = tmp.with_name(tmp.name + ".old")
        if out.exists():  # set aside first: a crash leaves the old export or the new one, never neither
            os.replace(out, aside)
        os.replace(tmp, out)
        shutil.rmtree(aside, ignore_errors=True)
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

