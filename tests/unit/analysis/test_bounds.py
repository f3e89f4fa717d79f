"""PAC-Bayes / Occam bounds and Gumbel-max sampling (docs/methods.md §2.23)."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.analysis.bounds import (
    code_length_bits, elias_gamma_bits, example_seed, gumbel_argmax, gumbel_generate, gumbel_noise, kl_bernoulli,
    kl_inverse_upper, occam_bound,
)


def test_binary_kl_golden():
    # kl(½‖0.9) = ½ ln(½/0.9) + ½ ln(½/0.1) = −½ ln(4·0.9·0.1) = −½ ln 0.36 ≈ 0.5108256
    assert kl_bernoulli(0.5, 0.9) == pytest.approx(-0.5 * math.log(0.36), abs=1e-12)
    assert kl_bernoulli(0.5, 0.9) == pytest.approx(0.5108256, abs=1e-7)
    assert kl_bernoulli(0.0, 0.5) == pytest.approx(math.log(2))  # −ln(1 − p)
    assert kl_bernoulli(0.3, 0.3) == 0.0 and kl_bernoulli(0.5, 1.0) == math.inf


def test_kl_inverse_golden():
    # q = 0: kl(0‖p) = −ln(1 − p) = ln 2 ⇔ p = ½
    assert kl_inverse_upper(0.0, math.log(2)) == pytest.approx(0.5, abs=1e-12)
    # q = ½: kl(½‖0.9) = −½ ln 0.36 (above), so the inverse of that budget is 0.9
    assert kl_inverse_upper(0.5, -0.5 * math.log(0.36)) == pytest.approx(0.9, abs=1e-12)
    # c = 0 gives q itself; kl is quadratic in p − q there, so float rounding leaves ~1e-9 of slack
    assert 0.2 <= kl_inverse_upper(0.2, 0.0) <= 0.2 + 1e-8
    assert kl_inverse_upper(0.2, 50.0) == 1.0
    p = kl_inverse_upper(0.1, 0.05)
    assert p >= 0.1 and kl_bernoulli(0.1, p) == pytest.approx(0.05, abs=1e-9)


def test_occam_bound_golden_values():
    # 0 errors in n = 100, C = 0 bits, δ = 0.05: budget c = ln(2·√100/0.05)/100 = ln(400)/100,
    # bound = kl⁻¹(0, c) = 1 − e^(−c) = 1 − 400^(−0.01) ≈ 0.0581551
    assert occam_bound(0, 100, 0, 0.05) == pytest.approx(1 - 400**-0.01, abs=1e-12)
    # C = 10 bits adds 10 ln 2 to the numerator: 1 − exp(−(10 ln 2 + ln 400)/100) ≈ 0.1212276
    assert occam_bound(0, 100, 10, 0.05) == pytest.approx(0.1212276, abs=1e-7)
    # Hoeffding: 0.1 + sqrt(ln(1/0.05)/200) = 0.1 + sqrt(2.995732/200) ≈ 0.2223873
    assert occam_bound(10, 100, 0, 0.05, form="hoeffding") == pytest.approx(0.2223873, abs=1e-7)


def test_bound_is_a_probability_above_the_empirical_error():
    for n in (1, 10, 1000):
        for errors in (0, n // 2, n):
            for bits in (0, 100, 10**6):
                for form in ("kl_inverse", "hoeffding"):
                    r = occam_bound(errors, n, bits, 0.05, form)
                    assert errors / n <= r <= 1.0, (errors, n, bits, form)


def test_bound_tightens_with_samples_and_loosens_with_bits():
    by_n = [occam_bound(n // 10, n, 200, 0.05) for n in (100, 200, 400, 800, 1600, 3200)]  # 10% error
    assert all(a > b for a, b in zip(by_n, by_n[1:])), by_n
    by_bits = [occam_bound(50, 1000, bits, 0.05) for bits in (0, 10, 100, 1000)]
    assert all(a < b for a, b in zip(by_bits, by_bits[1:])), by_bits
    # the kl form is tighter than Hoeffding at small empirical error
    assert occam_bound(0, 1000, 100) < occam_bound(0, 1000, 100, form="hoeffding")


def test_bound_rejects_bad_input():
    with pytest.raises(ValueError, match="errors"):
        occam_bound(5, 4, 0)
    with pytest.raises(ValueError, match="delta"):
        occam_bound(0, 4, 0, delta=0.0)
    with pytest.raises(ValueError, match="form"):
        occam_bound(0, 4, 0, form="bernstein")


def test_code_length():
    # Elias gamma: 2⌊log2 m⌋ + 1 → 1: 1, 2–3: 3, 4–7: 5, 8: 7
    assert [elias_gamma_bits(m) for m in (1, 2, 3, 4, 7, 8)] == [1, 3, 3, 5, 5, 7]
    # 7 numbers at 4 bits: γ(7) = 5, γ(4) = 5, two float32 grid numbers 64, codes 28 → 102
    assert code_length_bits(7, 4) == 102


def test_gumbel_max_frequencies_match_softmax():
    probs = torch.tensor([0.2, 0.5, 0.3])
    draws = 200_000
    samples = gumbel_argmax(probs.log().expand(draws, 3), gumbel_noise((draws, 3), seed=0))
    freq = torch.bincount(samples, minlength=3).float() / draws
    # standard error ≤ sqrt(0.25 / 2e5) ≈ 0.0011; allow ~4.5 of them
    torch.testing.assert_close(freq, probs, atol=0.005, rtol=0)


def test_gumbel_sampling_is_a_function_of_logits_and_noise():
    logits = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    noise = gumbel_noise((1, 4), seed=7)
    assert torch.equal(gumbel_noise((1, 4), seed=7), noise) and not torch.equal(gumbel_noise((1, 4), seed=8), noise)
    assert torch.equal(gumbel_argmax(logits, noise), gumbel_argmax(logits.clone(), noise.clone()))
    # zero noise is greedy; huge noise on one token picks it whatever the logits
    assert gumbel_argmax(logits, torch.zeros(1, 4)).item() == 3
    assert gumbel_argmax(logits, torch.tensor([[50.0, 0.0, 0.0, 0.0]])).item() == 0


def test_gumbel_generate_same_noise_same_sample_whatever_the_batch():
    from rlvr.models import build_char_tokenizer, build_tiny_model
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=16, layers=1, heads=2)
    prompts = ["12+3=", "45+6=", "78+9="]  # equal lengths: no padding differences between batches
    seeds = [example_seed(0, i) for i in range(3)]
    ids, texts = gumbel_generate(model, tok, prompts, seeds, max_new_tokens=8)
    again, _ = gumbel_generate(model, tok, prompts, seeds, max_new_tokens=8)
    assert torch.equal(ids, again) and len(texts) == 3
    alone, _ = gumbel_generate(model, tok, prompts[1:2], seeds[1:2], max_new_tokens=8)
    assert torch.equal(alone[0], ids[1, :alone.shape[1]])
    other, _ = gumbel_generate(model, tok, prompts, [example_seed(1, i) for i in range(3)], max_new_tokens=8)
    assert not torch.equal(other, ids[:, :other.shape[1]]) or other.shape != ids.shape
