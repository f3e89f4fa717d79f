"""Load any local Hugging Face checkpoint (Qwen, Llama, our tiny models) or GGUF file by path; render prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers import PreTrainedTokenizerFast

from rlvr.models.gguf import is_gguf, load_gguf_model, load_gguf_tokenizer
from rlvr.models.tokenizer import CHAR_TOKENIZER_MARK
from rlvr.types import Problem


def load_model(path: str | Path, dtype: torch.dtype | str = "auto", **kwargs: Any) -> PreTrainedModel:
    """``AutoModelForCausalLM.from_pretrained`` on a local folder (never downloads); a ``.gguf`` file
    is read and dequantised (rlvr.models.gguf)."""
    if is_gguf(path):
        return load_gguf_model(path, dtype, **kwargs)
    _check_folder(path, "config.json")
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True, **kwargs)


def load_tokenizer(path: str | Path, **kwargs: Any) -> PreTrainedTokenizerBase:
    """Our char tokenizer loads as ``PreTrainedTokenizerFast`` straight from tokenizer.json (an
    ``AutoTokenizer`` keyed on the model type could rebuild it and, e.g. for qwen2, drop spaces);
    any other tokenizer goes through ``AutoTokenizer``. A tokenizer without a pad token gets the
    eos token as pad (generation pads prompts on the left). A ``.gguf`` file gives the tokenizer
    its metadata describes."""
    tok = load_gguf_tokenizer(path, **kwargs) if is_gguf(path) else None
    folder = Path(path) if tok is not None else _check_folder(path, None)
    config_file = folder / "tokenizer_config.json"
    if tok is None and config_file.is_file() and (folder / "tokenizer.json").is_file():
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
        return format_messages(tokenizer, [{"role": "user", "content": text}])
    return text


def render_prompt(tokenizer: PreTrainedTokenizerBase, problem: Problem, text: str | None = None) -> str:
    """The prompt string the model sees for ``problem`` (rollouts, warm start and evaluation all use
    it): the conversation in ``problem.meta["messages"]`` (a dataset's conversational prompt or its
    ``system_prompt``, rlvr.tasks.chat) through the chat template with
    ``meta["chat_template_kwargs"]``, else ``format_prompt(tokenizer, problem.prompt)``. ``text``
    replaces the prompt text (the last user turn of a conversation), e.g. a hint sampler's prompt."""
    messages = problem.meta.get("messages")
    if not messages:
        return format_prompt(tokenizer, problem.prompt if text is None else text)
    if text is not None:
        messages = with_last_user(messages, text)
    return format_messages(tokenizer, messages, **problem.meta.get("chat_template_kwargs", {}))


def format_messages(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, Any]], **template_kwargs: Any) -> str:
    """``apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **template_kwargs)``,
    with a clear error for a tokenizer without a chat template."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("a conversational prompt (chat messages, task.params.system_prompt or "
                         "chat_template_kwargs) needs a tokenizer with a chat template; this one has none")
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **template_kwargs)


def with_last_user(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """``messages`` with the last user turn's content replaced by ``text`` (a user turn is added
    when there is none)."""
    last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last is None:
        return [*messages, {"role": "user", "content": text}]
    return [*messages[:last], {**messages[last], "content": text}, *messages[last + 1:]]


def _check_folder(path: str | Path, required: str | None) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder not found: {folder}")
    if required and not (folder / required).is_file():
        raise FileNotFoundError(f"{folder} has no {required}; is it a Hugging Face checkpoint folder?")
    return folder
