"""The loop engine's lean forward (rlvr.rollout.engines.lean): the model's own logits, teacher-forced.

Both paths are fed the same prompts and tokens, so nothing here depends on sampling. The lean forward
computes the model's products and sums, but q/k/v (and gate/up) as one matmul over joined weights
(another GEMM blocking) and transformers may pick another sdpa mask form (None, a boolean or an
additive mask), so other reduction orders: logits (|logit| < 1 for these random models) agree to
float32 rounding of a two-layer forward (1e-5 absolute, ~100 ulps);
under bf16 autocast each matmul's output keeps 8 bits of mantissa (relative 2^-8 per rounding, a
handful of roundings on the way: 5 % of the largest logit).
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rlvr.rollout.engines.lean import LeanDecoder, lean_refusal
from rlvr.rollout.engines.loop import ModelSteps, decode_steps

VOCAB = 40


def _model(kind: str, kv_heads: int = 4, attn: str = "sdpa", seed: int = 0):
    common = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=kv_heads, intermediate_size=64, max_position_embeddings=64,
                  attn_implementation=attn)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if kind == "llama":
            return LlamaForCausalLM(LlamaConfig(**common)).eval()
        model = Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=False)).eval()
        for layer in model.model.layers:  # Qwen2's q/k/v biases start at 0: make them count
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                torch.nn.init.normal_(proj.bias, std=0.5)
        return model


def _prompts(n: int = 6, p: int = 7):
    """Left-padded prompts (n, p): row i has i % 4 padding positions."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (n, p), generator=g)
    mask = torch.ones(n, p, dtype=torch.bool)
    for i in range(n):
        mask[i, : i % 4] = False
    ids[~mask] = 0
    pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
    return ids, mask, pos


def _teacher_forced(decoder, ids, mask, pos, steps: int = 5, drop_after: int | None = None):
    """Logits after the prompt and after each of ``steps`` fixed tokens; rows 0 and 2 leave at ``drop_after``."""
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(1, VOCAB, (steps, ids.shape[0]), generator=g)
    out = [decoder.prefill(ids, mask, pos)]
    attn, next_pos, rows = mask.long(), pos[:, -1:] + 1, torch.arange(ids.shape[0])
    for t in range(steps):
        if t == drop_after:
            keep = torch.tensor([r for r in range(rows.numel()) if int(rows[r]) not in (0, 2)])
            decoder.select(keep)
            attn, next_pos, rows = attn[keep], next_pos[keep], rows[keep]
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=-1)
        out.append(decoder.step(tokens[t, rows], attn, next_pos))
        next_pos = next_pos + 1
    return out


@pytest.mark.parametrize("kind,kv_heads", [("llama", 4), ("llama", 2), ("qwen2", 2)])
@pytest.mark.parametrize("drop_after", [None, 2])
def test_lean_logits_equal_the_models_forward(kind, kv_heads, drop_after):
    model = _model(kind, kv_heads)
    assert lean_refusal(model) is None
    ids, mask, pos = _prompts()
    with torch.no_grad():
        lean = _teacher_forced(LeanDecoder(model, ids.shape[1] + 5), ids, mask, pos, drop_after=drop_after)
        ref = _teacher_forced(ModelSteps(model), ids, mask, pos, drop_after=drop_after)
    assert [x.shape for x in lean] == [x.shape for x in ref]
    for a, b in zip(lean, ref):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_large_models_keep_separate_matmuls_with_the_same_logits(monkeypatch):
    """Above JOIN_MAX_BYTES the decoder keeps q/k/v and gate/up as separate matmuls (no joined copy)."""
    import rlvr.rollout.engines.lean as lean
    monkeypatch.setattr(lean, "JOIN_MAX_BYTES", 0)
    model = _model("qwen2", 2)
    ids, mask, pos = _prompts()
    decoder = LeanDecoder(model, ids.shape[1] + 5)
    assert decoder.qkv == [None, None] and decoder.gate_up == [None, None]
    with torch.no_grad():
        lean_out = _teacher_forced(decoder, ids, mask, pos, drop_after=2)
        ref = _teacher_forced(ModelSteps(model), ids, mask, pos, drop_after=2)
    for a, b in zip(lean_out, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_lean_logits_under_bf16_autocast():
    model = _model("llama", 2)
    ids, mask, pos = _prompts()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        lean = _teacher_forced(LeanDecoder(model, ids.shape[1] + 5), ids, mask, pos)
        ref = _teacher_forced(ModelSteps(model), ids, mask, pos)
    for a, b in zip(lean, ref):
        torch.testing.assert_close(a.float(), b.float(), rtol=0, atol=0.05 * float(b.abs().max()))


def test_models_the_lean_forward_refuses_get_their_own_forward():
    model = _model("llama")
    assert isinstance(decode_steps(model, 8), LeanDecoder)
    assert isinstance(decode_steps(model, 8, lean=False), ModelSteps)
    eager = _model("llama", attn="eager")
    assert lean_refusal(eager) is None  # the same math; sdpa computes it
    cases = {}
    odd = _model("llama")
    odd.config._attn_implementation = "flash_attention_2"
    cases["attention implementation 'flash_attention_2'"] = odd
    hooked = _model("llama")
    hooked.model.layers[0].mlp.register_forward_hook(lambda *_: None)
    cases["hooks on the decoder"] = hooked

    class Wrapped(torch.nn.Linear):
        pass

    wrapped = _model("llama")
    old = wrapped.model.layers[1].self_attn.v_proj
    wrapped.model.layers[1].self_attn.v_proj = Wrapped(old.in_features, old.out_features, bias=False)
    cases["a wrapped linear layer"] = wrapped
    layernorm = _model("llama")
    layernorm.model.norm = torch.nn.LayerNorm(32)
    cases["a norm other than RMSNorm"] = layernorm
    windowed = _model("qwen2")
    windowed.config.use_sliding_window = True
    cases["sliding-window attention"] = windowed
    dropout = _model("llama")
    dropout.config.attention_dropout = 0.1
    assert lean_refusal(dropout) is None  # eval mode: no dropout
    cases["attention dropout in training mode"] = dropout.train()
    for reason, m in cases.items():
        assert reason in lean_refusal(m)
        assert isinstance(decode_steps(m, 8), ModelSteps)
    other = _model("llama")
    other.config.model_type = "gpt2"
    assert "model type 'gpt2'" in lean_refusal(other)


def test_lora_models_get_their_own_forward():
    peft = pytest.importorskip("peft")
    lora = peft.get_peft_model(_model("llama"), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert lean_refusal(lora) is not None and lean_refusal(lora.base_model.model) is not None
    assert isinstance(decode_steps(lora, 8), ModelSteps)


@pytest.mark.parametrize("kv_heads", [9, 3, 1])
def test_one_query_attention_equals_sdpa(kv_heads):
    """The decode step's attention (one query, grouped heads as small products) against torch's sdpa
    with the same boolean mask: float32 scores of 64-long dot products (rounding up to ~64 ulps of the
    largest product, summed in another order or blocking) and a softmax over 12 keys agree to float32
    rounding: 1e-5 absolute on outputs of size ~1, as the decoder tests above."""
    from rlvr.rollout.engines.lean import _one_query_attention
    g = torch.Generator().manual_seed(3)
    q = torch.randn(5, 9, 1, 64, generator=g)
    keys, values = torch.randn(2, 5, kv_heads, 12, 64, generator=g).unbind(0)
    mask = torch.ones(5, 1, 1, 12, dtype=torch.bool)
    mask[1, ..., :4] = False  # left padding of row 1
    mask[3, ..., :11] = False  # row 3 sees its own key only
    ref = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=0.125,
                                                           enable_gqa=kv_heads != 9)
    out = _one_query_attention(q, keys, values, mask, 0.125)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(out[3], values[3].repeat_interleave(9 // kv_heads, 0)[:, -1:], rtol=0, atol=1e-5)


@pytest.mark.parametrize("lean", [True, False])
def test_shared_prefill_gives_every_repeated_row_its_own_prompts_logits_and_cache(lean):
    """Groups repeat a prompt G times; ``shared_prefill`` runs each distinct prompt once and copies its
    cache to the repeats. Teacher-forced logits (prefill and 4 decode steps, one token per row) equal
    a full prefill's to float32 rounding of another batch size's GEMM blocking (same 1e-5 as above);
    a hidden-state capture gets one (H,) row per prompt row; distinct prompts go through unchanged."""
    from rlvr.rollout.engines.base import HiddenCapture
    from rlvr.rollout.engines.loop import shared_prefill
    model = _model("llama", 2)
    base_ids, base_mask, base_pos = _prompts(n=3)
    order = torch.tensor([0, 1, 0, 2, 1, 0, 2, 2])  # three prompts, repeated out of order
    ids, mask, pos = base_ids[order], base_mask[order], base_pos[order]
    tokens = torch.randint(1, VOCAB, (4, order.numel()), generator=torch.Generator().manual_seed(3))

    def run(prefill):
        decoder, capture = decode_steps(model, ids.shape[1] + 4, lean), HiddenCapture(model, order.numel(), 1)
        out = [prefill(decoder, capture)]
        capture.store(torch.arange(order.numel()), 0)
        capture.close()
        attn, next_pos = mask.long(), pos[:, -1:] + 1
        for t in range(4):
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=-1)
            out.append(decoder.step(tokens[t], attn, next_pos))
            next_pos = next_pos + 1
        return out, capture.hidden[:, 0]

    with torch.no_grad():
        shared, shared_h = run(lambda d, c: shared_prefill(d, ids, mask, pos, c))
        full, full_h = run(lambda d, c: d.prefill(ids, mask, pos))
    for a, b in zip(shared, full):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    torch.testing.assert_close(shared_h, full_h, rtol=0, atol=1e-5)
    assert not torch.equal(shared[0][0], shared[0][1])  # the rows really are different prompts
    with torch.no_grad():
        distinct = shared_prefill(decode_steps(model, base_ids.shape[1], lean), base_ids, base_mask, base_pos)
        torch.testing.assert_close(distinct, LeanDecoder(model, base_ids.shape[1]).prefill(base_ids, base_mask, base_pos),
                                   rtol=0, atol=1e-5)


def test_weights_cast_once_under_autocast_give_the_same_logits_bit_for_bit(monkeypatch):
    """Under bf16 autocast the decoder holds its layers' weights cast once (``CAST_MAX_BYTES``) instead of
    letting autocast cast them at every matmul: the same round-to-nearest of the same float32 values,
    so the logits are identical (tolerance 0) to a joined decoder that leaves the cast to autocast."""
    import rlvr.rollout.engines.lean as lean
    model = _model("qwen2", 2)
    ids, mask, pos = _prompts()
    outs = []
    for cast_max in (lean.CAST_MAX_BYTES, 0):
        monkeypatch.setattr(lean, "CAST_MAX_BYTES", cast_max)
        monkeypatch.setattr(lean, "JOIN_MAX_BYTES", 1 << 40)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            decoder = LeanDecoder(model, ids.shape[1] + 5)
            outs.append(_teacher_forced(decoder, ids, mask, pos, drop_after=2))
        held = {w.dtype for w, _ in decoder.qkv + decoder.gate_up}
        assert held == ({torch.bfloat16} if cast_max else {torch.float32})
        assert (decoder.out[0][0][0].dtype == torch.bfloat16) if cast_max else decoder.out == [None, None]
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    with torch.no_grad():  # outside autocast nothing is cast
        assert LeanDecoder(model, 8).dtype is None
