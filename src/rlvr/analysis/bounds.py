"""PAC-Bayes / Occam compression bounds on the accuracy of a compressed policy (docs/methods.md §2.23).

Setting. A hypothesis h (the base model, fixed before seeing any test data, plus an adapter of
C bits under a prefix-free code fixed in advance) answers an i.i.d. test problem x. Sampling is
made a deterministic function of the weights and of per-example noise g with the **Gumbel-max
trick**: ``y_t = argmax_v (z_v/τ + g_{t,v})``, ``g ∼ Gumbel(0, 1)`` i.i.d., is an exact sample of
``softmax(z/τ)``. The pair (x, g) is the i.i.d. example and ``h(x, g)`` is deterministic, so the
Occam bound applies to the sampling policy itself. With probability ≥ 1 − δ over n examples

    kl(R̂ ‖ R) ≤ (C ln 2 + ln(2√n/δ)) / n            (kl-inverse form, Langford / Maurer)
    R ≤ R̂ + sqrt((C ln 2 + ln(1/δ)) / (2n))          (Hoeffding form, looser)

with R the error rate (1 − accuracy) and R̂ its empirical value; the kl form is inverted by
bisection. The accuracy lower bound is ``1 − R_upper``. The prior over hypotheses is 2^(−C): the
rank, u, tie and seed of the adapter are part of the code's definition and must be fixed before
the test sample is drawn (trying several choices costs a union bound).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

FORMS = ("kl_inverse", "hoeffding")


def kl_bernoulli(q: float, p: float) -> float:
    """``kl(q‖p) = q ln(q/p) + (1 − q) ln((1 − q)/(1 − p))`` (0 ln 0 = 0; ∞ when p excludes q)."""
    def term(a: float, b: float) -> float:
        if a == 0.0:
            return 0.0
        return math.inf if b == 0.0 else a * math.log(a / b)
    return term(q, p) + term(1.0 - q, 1.0 - p)


def kl_inverse_upper(q: float, c: float, iters: int = 100) -> float:
    """``max {p ∈ [q, 1] : kl(q‖p) ≤ c}`` by bisection (kl(q‖·) increases on [q, 1]); returns the
    upper end of the final bracket, so rounding never makes the bound optimistic."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"kl_inverse_upper: q must be in [0, 1], got {q}")
    if c < 0:
        raise ValueError(f"kl_inverse_upper: c must be >= 0, got {c}")
    lo, hi = q, 1.0
    if kl_bernoulli(q, hi) <= c:
        return 1.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if kl_bernoulli(q, mid) <= c:
            lo = mid
        else:
            hi = mid
    return hi


def occam_bound(errors: int, n: int, bits: float, delta: float = 0.05, form: str = "kl_inverse") -> float:
    """Upper bound on the true error rate of a hypothesis of ``bits`` bits with ``errors`` mistakes
    on ``n`` i.i.d. examples, holding with probability ≥ 1 − ``delta``; in [0, 1]."""
    if n < 1 or not 0 <= errors <= n:
        raise ValueError(f"occam_bound: need n >= 1 and 0 <= errors <= n, got errors={errors}, n={n}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"occam_bound: delta must be in (0, 1), got {delta}")
    if bits < 0:
        raise ValueError(f"occam_bound: bits must be >= 0, got {bits}")
    emp = errors / n
    if form == "kl_inverse":
        return kl_inverse_upper(emp, (bits * math.log(2) + math.log(2 * math.sqrt(n) / delta)) / n)
    if form == "hoeffding":
        return min(1.0, emp + math.sqrt((bits * math.log(2) + math.log(1 / delta)) / (2 * n)))
    raise ValueError(f"occam_bound: form must be one of {FORMS}, got '{form}'")


def elias_gamma_bits(m: int) -> int:
    """Length of the Elias-gamma code of an integer m ≥ 1: ``2⌊log2 m⌋ + 1`` (prefix-free)."""
    if m < 1:
        raise ValueError(f"elias_gamma_bits: m must be >= 1, got {m}")
    return 2 * (m.bit_length() - 1) + 1


def code_length_bits(num_values: int, bits: int, float_bits: int = 32, num_floats: int = 2) -> int:
    """Prefix-free code length C of a k-bit quantised vector: Elias-gamma(n) + Elias-gamma(k) for the
    header, ``num_floats`` grid numbers (origin and step) of ``float_bits`` each, then n·k bits."""
    return elias_gamma_bits(num_values) + elias_gamma_bits(bits) + num_floats * float_bits + num_values * bits


# --- Gumbel-max sampling: a deterministic function of logits and noise ------------------------

def gumbel_noise(shape: tuple[int, ...], seed: int) -> Tensor:
    """``g = −ln(−ln U)``, U ∼ Uniform(0, 1), float32, from its own generator seeded with ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.rand(shape, generator=gen, dtype=torch.float64).clamp(1e-300, 1.0 - 1e-16)
    return (-torch.log(-torch.log(u))).float()


def gumbel_argmax(logits: Tensor, noise: Tensor, temperature: float = 1.0) -> Tensor:
    """``argmax_v (z_v/τ + g_v)`` over the last dim: an exact sample of ``softmax(z/τ)``."""
    if temperature <= 0:
        raise ValueError(f"gumbel_argmax: temperature must be > 0, got {temperature}")
    return (logits.float() / temperature + noise).argmax(-1)


def example_seed(seed: int, index: int) -> int:
    """The noise seed of example ``index``: fixed per example, independent of batching."""
    return (seed * 1_000_003 + index * 7_919 + 1) % (2**63 - 1)


def step_noise(seeds: list[int], t: int, vocab: int) -> Tensor:
    """(N, V) Gumbel noise of decoding step t for rows with noise seeds ``seeds`` (one small draw
    per row and step, so memory stays O(N·V) whatever the completion length)."""
    return torch.stack([gumbel_noise((vocab,), (s * 1_000_033 + t) % (2**63 - 1)) for s in seeds])


@torch.no_grad()
def gumbel_generate(model: torch.nn.Module, tokenizer, prompts: list[str], seeds: list[int], *,
                    max_new_tokens: int, temperature: float = 1.0) -> tuple[Tensor, list[str]]:
    """Decode one completion per prompt with per-row Gumbel noise (row i uses ``seeds[i]``), no cache.

    Returns completion ids (N, T) (pad after the first eos) and texts. Same weights + same seeds →
    the same completions, whatever the batch (up to the float effects of left padding)."""
    from rlvr.rollout import encode_prompts
    ids, mask = encode_prompts(tokenizer, prompts)  # (N, P) left-padded
    dev = next(model.parameters()).device
    ids, mask = ids.to(dev), mask.to(dev).long()
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=dev)
    out = []
    was_training = model.training
    model.eval()
    for t in range(max_new_tokens):
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1).logits[:, -1]  # (N, V)
        token = gumbel_argmax(logits, step_noise(seeds, t, logits.shape[-1]).to(dev), temperature)
        token = torch.where(done, torch.full_like(token, pad), token)
        out.append(token)
        done = done | (token == eos)
        real = ~done | (token == eos)  # the eos itself is a real token; pads after it are not
        ids, mask = torch.cat([ids, token[:, None]], 1), torch.cat([mask, real[:, None].long()], 1)
        if done.all():
            break
    model.train(was_training)
    completion = torch.stack(out, 1)  # (N, T)
    return completion, tokenizer.batch_decode(completion, skip_special_tokens=True)
