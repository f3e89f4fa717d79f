"""Models and tokenizers: tiny testbed builders and loaders for local Hugging Face checkpoints."""

from rlvr.models.loading import format_messages, format_prompt, load_model, load_tokenizer, render_prompt
from rlvr.models.tiny import build_tiny_model, count_parameters
from rlvr.models.tokenizer import DEFAULT_CHARSET, SPECIAL_TOKENS, build_char_tokenizer, is_char_tokenizer

__all__ = [
    "DEFAULT_CHARSET", "SPECIAL_TOKENS", "build_char_tokenizer", "build_tiny_model", "count_parameters",
    "format_messages", "format_prompt", "is_char_tokenizer", "load_model", "load_tokenizer", "render_prompt",
]
