"""A character-level tokenizer made locally with the ``tokenizers`` library (nothing downloaded).

Every character of the charset is one token; ``<bos>`` is prepended to every encoding by the
post-processor; padding is on the left (generation appends on the right); spaces are ordinary
tokens, so ``decode(encode(s)) == s`` for any string over the charset.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")  # ids 0, 1, 2, 3
# Printable ASCII (space .. '~') plus newline: 96 characters, 100 tokens with the specials.
DEFAULT_CHARSET = "".join(chr(c) for c in range(32, 127)) + "\n"
CHAR_TOKENIZER_MARK = "rlvr-char"  # stored in tokenizer_config.json so load_tokenizer recognises ours


def build_char_tokenizer(charset: str | None = None) -> PreTrainedTokenizerFast:
    """A character-level ``PreTrainedTokenizerFast`` over ``charset`` (printable ASCII + newline).

    Ids: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3, then the characters in charset order.
    """
    chars = list(dict.fromkeys(DEFAULT_CHARSET if charset is None else charset))  # de-dup, keep order
    if any(len(c) != 1 for c in chars) or not chars:
        raise ValueError("build_char_tokenizer: charset must be a non-empty string of characters")
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Split into single characters ([\s\S] so newline is a character too), keeping every one.
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()  # join characters with nothing in between
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
        unk_token="<unk>", padding_side="left", clean_up_tokenization_spaces=False,
        model_max_length=4096)
    tok.init_kwargs["rlvr_tokenizer"] = CHAR_TOKENIZER_MARK
    return tok


def is_char_tokenizer(tokenizer: object) -> bool:
    """True when ``tokenizer`` was made by :func:`build_char_tokenizer` (or loaded from one)."""
    init = getattr(tokenizer, "init_kwargs", {}) or {}
    return init.get("rlvr_tokenizer") == CHAR_TOKENIZER_MARK
