"""Load any local Hugging Face checkpoint (Qwen, Llama, our tiny models) by path; format prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers import PreTrainedTokenizerFast

from rlvr.models.tokenizer import CHAR_TOKENIZER_MARK


def load_model(path: str | Path, dtype: torch.dtype | str = "auto", **kwargs: Any) -> PreTrainedModel:
    """``AutoModelForCausalLM.from_pretrained`` on a local folder (never downloads)."""
    _check_folder(path, "config.json")
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True, **kwargs)


def load_tokenizer(path: str | Path, **kwargs: Any) -> PreTrainedTokenizerBase:
    """Our char tokenizer loads as ``PreTrainedTokenizerFast`` straight from tokenizer.json (an
    ``AutoTokenizer`` keyed on the model type could rebuild it and, e.g. for qwen2, drop spaces);
    any other tokenizer goes through ``AutoTokenizer``. A tokenizer without a pad token gets the
    eos token as pad (generation pads prompts on the left)."""
    folder = _check_folder(path, None)
    config_file = folder / "tokenizer_config.json"
    tok = None
    if config_file.is_file() and (folder / "tokenizer.json").is_file():
        config = json.loads(config_file.read_text())
        if config.get("rlvr_tokenizer") == CHAR_TOKENIZER_MARK:
            tok = PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True, **kwargs)
    if tok is None:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, **kwargs)
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    return tok


def format_prompt(tokenizer: PreTrainedTokenizerBase, text: str) -> str:
    """The prompt string the model sees: the chat template (one user turn, generation prompt on)
    when the tokenizer has one, else ``text`` unchanged. Tokenizing the result adds ``<bos>``
    (our char tokenizer) — a chat template that writes its own bos is the template's business."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
    return text


def _check_folder(path: str | Path, required: str | None) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder not found: {folder}")
    if required and not (folder / required).is_file():
        raise FileNotFoundError(f"{folder} has no {required}; is it a Hugging Face checkpoint folder?")
    return folder
