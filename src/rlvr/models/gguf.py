"""A ``.gguf`` file as a model path: read by transformers through the ``gguf`` package and dequantised.

transformers marks a model it read from a GGUF file as quantised with method "gguf" and then refuses
``save_pretrained``; the weights it holds are ordinary (dequantised) tensors all the same. So the
model is rebuilt here from its config without the quantisation entry and given those weights: an
ordinary model that trains, checkpoints and exports like one loaded from a folder.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch

GGUF_HINT = "pip install 'rlvr[gguf]' (the gguf package)"


def is_gguf(path: str | Path) -> bool:
    """Whether ``path`` names a GGUF file (by its suffix)."""
    return Path(path).suffix.lower() == ".gguf"


def _check_gguf_file(path: str | Path) -> Path:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"GGUF file not found: {file}")
    if importlib.util.find_spec("gguf") is None:
        raise ImportError(f"loading {file.name} needs the gguf package: {GGUF_HINT}")
    return file


def load_gguf_model(path: str | Path, dtype: torch.dtype | str = "auto", **kwargs: Any) -> Any:
    """The causal LM in the GGUF file ``path``, dequantised (``dtype='auto'``: float32), as an
    ordinary transformers model (no quantisation config, so ``save_pretrained`` works)."""
    from transformers import AutoModelForCausalLM

    file = _check_gguf_file(path)
    read_dtype = torch.float32 if dtype == "auto" else dtype
    read = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name, dtype=read_dtype,
                                                local_files_only=True, **kwargs)
    return plain_copy(read)


def plain_copy(model: Any) -> Any:
    """``model`` rebuilt from its config without ``quantization_config``, holding the same weights
    (the GGUF-read model is dropped by the caller)."""
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    dtype = next(model.parameters()).dtype
    plain = AutoModelForCausalLM.from_config(config, dtype=dtype,
                                             attn_implementation=config._attn_implementation)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    tied = set(getattr(plain, "_tied_weights_keys", None) or ())
    if unexpected or set(missing) - tied:
        raise ValueError(f"GGUF model: weights do not match its config (missing {sorted(missing)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]})")
    plain.tie_weights()
    plain.generation_config = model.generation_config
    return plain.eval()


def load_gguf_tokenizer(path: str | Path, **kwargs: Any) -> Any:
    """The tokenizer the GGUF file ``path`` describes (vocabulary, merges, special tokens, chat
    template), as transformers rebuilds it."""
    from transformers import AutoTokenizer

    file = _check_gguf_file(path)
    return AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name, local_files_only=True, **kwargs)
