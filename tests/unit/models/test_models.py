"""Tiny model and char tokenizer: round trips, special tokens, padding side, save/load."""

import pytest
import torch
from transformers import AutoTokenizer

from rlvr.models import (build_char_tokenizer, build_tiny_model, count_parameters, format_prompt,
                         load_model, load_tokenizer)


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def test_tokenizer_special_ids_and_bos(tok):
    # specials come first in a fixed order; every encoding starts with <bos>
    assert [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id] == [0, 1, 2, 3]
    ids = tok("12+3=")["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == 1 + 5
    assert len(tok) == 4 + 96  # printable ASCII (95) + newline


def test_tokenizer_keeps_spaces_and_round_trips(tok):
    text = "a b  c\n7+5=12;#632"
    ids = tok(text)["input_ids"]
    assert len(ids) == 1 + len(text)  # one token per character
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_tokenizer_pads_left(tok):
    batch = tok(["1+1=", "123*4="], padding=True, return_tensors="pt")
    # the shorter prompt gets 2 pads on the left, so both prompts end at the last column
    assert batch["input_ids"][0, :2].tolist() == [tok.pad_token_id] * 2
    assert batch["attention_mask"][0].tolist() == [0, 0, 1, 1, 1, 1, 1]
    assert batch["input_ids"][0, 2].item() == tok.bos_token_id


def test_custom_charset_and_unknown_chars():
    tok = build_char_tokenizer("0123456789+=")
    assert len(tok) == 4 + 12
    assert tok("1x")["input_ids"] == [1, tok.convert_tokens_to_ids("1"), tok.unk_token_id]


def test_tiny_model_size_and_ids(tok):
    model = build_tiny_model(tok)
    # embeddings 100*128 (tied) + 2 layers * (4*128^2 attention + 3*128*512 MLP + 2*128 norms) + 128 final norm
    expected = 100 * 128 + 2 * (4 * 128 * 128 + 3 * 128 * 512 + 2 * 128) + 128
    assert count_parameters(model) == expected == 537_728
    assert model.config.vocab_size == len(tok)
    assert model.config.eos_token_id == tok.eos_token_id == model.generation_config.eos_token_id
    assert model.generation_config.pad_token_id == tok.pad_token_id


def test_tiny_model_seed_fixes_weights_only(tok):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_tiny_model(tok, hidden=32, layers=1, heads=2, seed=7)
    after = torch.rand(1)
    b = build_tiny_model(tok, hidden=32, layers=1, heads=2, seed=7)
    c = build_tiny_model(tok, hidden=32, layers=1, heads=2, seed=8)
    assert torch.equal(before, after)  # the global RNG is untouched by building
    wa, wb, wc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_save_and_load_round_trip(tok, tmp_path):
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model2, tok2 = load_model(tmp_path), load_tokenizer(tmp_path)
    x = torch.tensor([tok("347+285=")["input_ids"]])
    assert torch.allclose(model(x).logits, model2(x).logits)
    assert tok2.padding_side == "left"
    assert tok2("a b")["input_ids"] == tok("a b")["input_ids"]
    # AutoTokenizer on the same folder keeps the spaces too (the model config is Llama-style)
    auto = AutoTokenizer.from_pretrained(str(tmp_path))
    assert auto.decode(auto("a b")["input_ids"], skip_special_tokens=True) == "a b"


def test_load_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_model(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path)


def test_format_prompt_plain_and_chat(tok):
    assert format_prompt(tok, "12+3=") == "12+3="
    chat = build_char_tokenizer()
    chat.chat_template = "{% for m in messages %}<{{ m['content'] }}>{% endfor %}{% if add_generation_prompt %}A:{% endif %}"
    assert format_prompt(chat, "hi") == "<hi>A:"
