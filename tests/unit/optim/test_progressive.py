"""Progressive RLVR parts (docs/methods.md §2.23): TinyLoRA, k-bit quantisation, reverse-KL distillation."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from rlvr.loops.progressive import ProgressiveConfig, reverse_kl_full, reverse_kl_sampled
from rlvr.optim.quantize import dequantize, quantize
from rlvr.optim.tinylora import (
    TinyLoRAConfig, TinyLoRALinear, adapter_vector, apply_tinylora, load_adapter_vector, merged_copy, tie_group,
)
from rlvr.registry import build


def _model(layers: int = 2):
    from rlvr.models import build_char_tokenizer, build_tiny_model
    return build_tiny_model(build_char_tokenizer(), hidden=16, layers=layers, heads=2)


# --- TinyLoRA -------------------------------------------------------------------------------

def test_tinylora_golden_delta_on_a_diagonal_weight():
    # W = diag(3, 1): SVD U = V = I (up to a shared sign), Σ = (3, 1). Rank 1, u = 1, P_1 = [[1]]:
    # ΔW = U_1 Σ_1 (v·P_1) V_1ᵀ = 3·v·e1 e1ᵀ; with v = 0.5 → [[1.5, 0], [0, 0]].
    lin = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.diag(torch.tensor([3.0, 1.0])))
    wrapped = TinyLoRALinear(lin, rank=1, projections=torch.ones(1, 1, 1), v=nn.Parameter(torch.tensor([0.5])))
    torch.testing.assert_close(wrapped.delta_weight(), torch.tensor([[1.5, 0.0], [0.0, 0.0]]))
    x = torch.tensor([[1.0, 2.0]])
    torch.testing.assert_close(wrapped(x), x @ torch.tensor([[4.5, 0.0], [0.0, 1.0]]).T)


def test_tinylora_with_v_zero_is_the_base_model_exactly():
    model = _model()
    ids = torch.tensor([[1, 5, 9, 12]])
    before = model(input_ids=ids).logits
    base_state = {k: v.clone() for k, v in model.state_dict().items()}
    apply_tinylora(model, TinyLoRAConfig(rank=2, u=3, tie="none"))
    assert torch.equal(model(input_ids=ids).logits, before)
    merged = merged_copy(model).state_dict()
    assert set(merged) == set(base_state) and all(torch.equal(merged[k], base_state[k]) for k in base_state)


@pytest.mark.parametrize("tie,groups", [("all", 1), ("layers", 7), ("modules", 2), ("none", 14)])
def test_tinylora_trainable_count_is_u_per_tie_group(tie, groups):
    model = _model(layers=2)  # 2 decoder layers × 7 linears (q, k, v, o, gate, up, down)
    adapter = apply_tinylora(model, TinyLoRAConfig(rank=1, u=3, tie=tie))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert len(adapter) == groups and trainable == 3 * groups
    assert sum(isinstance(m, TinyLoRALinear) for m in model.modules()) == 14


def test_tinylora_delta_has_rank_r_and_forward_matches_merged_weights():
    model = _model()
    adapter = apply_tinylora(model, TinyLoRAConfig(rank=2, u=4, tie="layers", seed=1))
    load_adapter_vector(adapter, torch.randn(adapter_vector(adapter).numel()))
    module = model.model.layers[1].mlp.up_proj
    assert torch.linalg.matrix_rank(module.delta_weight()) == 2
    x = torch.randn(3, module.base.in_features)
    torch.testing.assert_close(module(x), x @ (module.base.weight + module.delta_weight()).T, rtol=1e-5, atol=1e-5)
    ids = torch.tensor([[1, 5, 9, 12]])
    torch.testing.assert_close(merged_copy(model)(input_ids=ids).logits, model(input_ids=ids).logits,
                               rtol=1e-5, atol=1e-5)


def test_tie_groups_and_vector_round_trip():
    name = "model.layers.3.self_attn.q_proj"
    assert tie_group(name, "layers") == "q_proj" and tie_group(name, "modules") == "layer3"
    assert tie_group(name, "all") == "all" and tie_group(name, "none") == "model_layers_3_self_attn_q_proj"
    adapter = apply_tinylora(_model(), TinyLoRAConfig(rank=1, u=2, tie="modules"))
    flat = torch.arange(4.0)
    load_adapter_vector(adapter, flat)
    assert torch.equal(adapter_vector(adapter), flat) and adapter["layer1"].tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match="vector of 3 numbers"):
        load_adapter_vector(adapter, torch.zeros(3))


# --- quantisation ---------------------------------------------------------------------------

def test_quantize_golden_two_bits():
    # grid over [0, 1] with 2² − 1 = 3 steps of 1/3: 0.3 → round(0.9) = 1 → 1/3
    q = quantize(torch.tensor([0.0, 0.3, 1.0]), bits=2)
    assert q.codes.tolist() == [0, 1, 3] and q.step == pytest.approx(1 / 3)
    torch.testing.assert_close(dequantize(q), torch.tensor([0.0, 1 / 3, 1.0]))


@pytest.mark.parametrize("bits", [1, 3, 8])
def test_quantize_dequantize_round_trip(bits):
    x = torch.randn(50, generator=torch.Generator().manual_seed(bits))
    q = quantize(x, bits)
    back = dequantize(q)
    assert q.codes.min() >= 0 and q.codes.max() <= 2**bits - 1
    assert (back.double() - x.double()).abs().max() <= q.step / 2 + 1e-7  # at most half a grid step
    assert torch.equal(quantize(back, bits).codes, q.codes)  # grid values come back on the same codes
    assert torch.equal(dequantize(quantize(back, bits)), back)


def test_quantize_constant_and_bad_input():
    q = quantize(torch.full((4,), 0.25), bits=2)
    assert torch.equal(dequantize(q), torch.full((4,), 0.25))
    with pytest.raises(ValueError, match="bits"):
        quantize(torch.zeros(2), bits=0)
    with pytest.raises(ValueError, match="NaN"):
        quantize(torch.tensor([0.0, math.nan]), bits=4)


# --- on-policy distillation -----------------------------------------------------------------

def test_full_reverse_kl_golden():
    # π_S = (1/2, 1/2), π_T = (1/4, 3/4): KL = ½ ln(½/¼) + ½ ln(½/¾) = ½ ln(4/3) ≈ 0.143841
    student = torch.zeros(1, 1, 2)
    teacher = torch.log(torch.tensor([[[0.25, 0.75]]]))
    mask = torch.ones(1, 1, dtype=torch.bool)
    assert reverse_kl_full(student, teacher, mask).item() == pytest.approx(0.5 * math.log(4 / 3), abs=1e-6)


def test_reverse_kl_is_zero_when_student_equals_teacher_and_ignores_masked_tokens():
    logp = torch.log(torch.tensor([[0.2, 0.5, 0.9]])).requires_grad_()
    mask = torch.tensor([[True, True, False]])
    loss, kl = reverse_kl_sampled(logp, logp.detach(), mask)
    loss.backward()
    assert kl.item() == 0.0 and loss.item() == 0.0 and torch.equal(logp.grad, torch.zeros_like(logp))
    teacher = torch.log(torch.tensor([[0.1, 0.5, 0.01]]))
    moved = teacher.clone()
    moved[0, 2] = 0.0  # a masked position changes nothing
    assert reverse_kl_sampled(logp, teacher, mask)[1] == reverse_kl_sampled(logp, moved, mask)[1]
    # sampled cost on the two trained tokens: (ln 0.2 − ln 0.1, ln 0.5 − ln 0.5) → mean ½ ln 2
    assert reverse_kl_sampled(logp, teacher, mask)[1].item() == pytest.approx(0.5 * math.log(2), abs=1e-6)


def test_sampled_estimator_gradient_equals_full_kl_gradient_in_expectation():
    # Σ_y π_S(y) · ∇[sg(log π_S(y) − log π_T(y)) · log π_S(y)] = ∇ KL(π_S‖π_T), since Σ_y π_S ∇log π_S = 0.
    z = torch.tensor([0.3, -0.2, 0.9], requires_grad=True)
    teacher = torch.log_softmax(torch.tensor([1.0, 0.0, -1.0]), -1)
    mask = torch.ones(1, 1, dtype=torch.bool)
    full = torch.autograd.grad(reverse_kl_full(z.view(1, 1, 3), teacher.view(1, 1, 3), mask), z)[0]
    probs = torch.softmax(z, -1).detach()
    expected = torch.zeros(3)
    for y in range(3):
        logp = torch.log_softmax(z, -1)[y].view(1, 1)
        loss, _ = reverse_kl_sampled(logp, teacher[y].view(1, 1), mask)
        expected += probs[y] * torch.autograd.grad(loss, z)[0]
    torch.testing.assert_close(expected, full)


# --- plug-in --------------------------------------------------------------------------------

def test_progressive_plugin_requires_tinylora_shape_and_checks_options():
    plugin = build("loop", "progressive_rlvr")
    with pytest.raises(ValueError, match=r"\['rank', 'u', 'tie'\] required"):
        plugin.trainer(None)
    with pytest.raises(ValueError, match="kl_estimator"):
        ProgressiveConfig(kl_estimator="forward")
    with pytest.raises(ValueError, match="tie must be one of"):
        ProgressiveConfig(rank=1, u=1, tie="rows").tinylora()
    assert ProgressiveConfig(rank=1, u=2, tie="all").tinylora() == TinyLoRAConfig(rank=1, u=2, tie="all")
