"""The std dial (rlvr.analysis.std_dial, docs/methods.md §2.30): closed-form coefficients on (ḡ⁺ − ḡ⁻),
the grpo estimator's std_power knob, and the identity against autograd gradients of the real
rlvr objective on a tiny model. Every expected number is derived in the comment above it."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr import AdvantageInputs, build
from rlvr.aggregation import Aggregation
from rlvr.analysis.std_dial import (
    batch_coefficients, binary_std, coefficient_table, dapo_coefficient, dial_coefficient, dr_grpo_coefficient,
    group_policy_gradient, grpo_coefficient, outcome_mean_gradients,
)
from rlvr.filters.zero_std import keep_groups_mask
from rlvr.losses.objective import Objective
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.types import LossInputs

# --- closed forms -----------------------------------------------------------------------------

# docs/methods.md §2.30 table, G = 8: σ = sqrt(k(8 − k))/8; k=1: sqrt(7)/8 = 0.3307, σ² = 7/64 = 0.1094;
# k=2: sqrt(12)/8 = 0.4330, σ² = 12/64 = 0.1875; k=4: 4/8 = 0.5, σ² = 0.25; k=0, 8: all 0.
TABLE_G8 = [(0, 0.0, 0.0), (1, 0.3307, 0.1094), (2, 0.4330, 0.1875), (4, 0.5000, 0.2500), (8, 0.0, 0.0)]


@pytest.mark.parametrize("k, sigma, sigma_sq", TABLE_G8)
def test_methods_table_g8(k, sigma, sigma_sq):
    assert binary_std(k, 8) == pytest.approx(sigma, abs=5e-5)
    assert dr_grpo_coefficient(k, 8) == pytest.approx(sigma_sq, abs=5e-5)
    assert grpo_coefficient(k, 8, ddof=0) == pytest.approx(sigma, abs=5e-5)
    row = coefficient_table(8, [k])[0]
    assert (row["sigma"], row["dr_grpo"], row["grpo"]) == pytest.approx((sigma, sigma_sq, sigma), abs=5e-5)


def test_unbiased_std_coefficient():
    # k=4, G=8: σ_unb = sqrt(4·4/(8·7)) = sqrt(2/7) = 0.534522; σ²/σ_unb = 0.25/0.534522 = 0.467707
    # = σ·sqrt((G−1)/G) = 0.5·sqrt(7/8).
    assert binary_std(4, 8, ddof=1) == pytest.approx(math.sqrt(2 / 7), rel=1e-12)
    assert grpo_coefficient(4, 8, ddof=1) == pytest.approx(0.5 * math.sqrt(7 / 8), rel=1e-12)
    for k in range(1, 8):  # the ratio to the population coefficient is sqrt((G−1)/G) for every split group
        assert grpo_coefficient(k, 8, ddof=1) / grpo_coefficient(k, 8) == pytest.approx(math.sqrt(7 / 8), rel=1e-12)


def test_dial_interpolates_and_dapo_drops_unanimous():
    # β = 0.5, k=4, G=8: σ^(2−0.5) = 0.5^1.5 = 0.353553; eps = 0.5 with β=1: 0.25/(0.5+0.5) = 0.25.
    assert dial_coefficient(4, 8, std_power=0.5) == pytest.approx(0.5 ** 1.5, rel=1e-12)
    assert dial_coefficient(4, 8, eps=0.5) == pytest.approx(0.25, rel=1e-12)
    assert dial_coefficient(4, 8, std_power=1.0) == grpo_coefficient(4, 8)
    assert dial_coefficient(4, 8, std_power=0.0) == dr_grpo_coefficient(4, 8)
    # DAPO: unanimous groups give 0; split groups keep GRPO's (unbiased-std) coefficient.
    assert dapo_coefficient(0, 8) == dapo_coefficient(8, 8) == 0.0
    assert dapo_coefficient(2, 8) == grpo_coefficient(2, 8, ddof=1) > 0


def test_batch_coefficients_filter_rescales_split_groups():
    # ks = (0, 4, 8, 2), G=8, GRPO population std: per-group σ = (0, 0.5, 0, 0.4330).
    # Without the filter each is divided by B = 4; with it by the 2 split groups.
    ks = [0, 4, 8, 2]
    s2 = math.sqrt(12) / 8
    torch.testing.assert_close(batch_coefficients(ks, 8), torch.tensor([0, 0.5, 0, s2], dtype=torch.float64) / 4)
    torch.testing.assert_close(batch_coefficients(ks, 8, drop_zero_sigma=True),
                               torch.tensor([0, 0.5, 0, s2], dtype=torch.float64) / 2)


def test_bad_counts_raise():
    with pytest.raises(ValueError, match="0 <= k <= G"):
        binary_std(9, 8)
    with pytest.raises(ValueError, match="binary"):
        outcome_mean_gradients(torch.zeros(2, 3), torch.tensor([0.5, 1.0]))


def test_outcome_mean_gradients_golden():
    # grads rows (1,0), (0,1), (2,2), rewards (1,0,1): ḡ⁺ = ((1,0)+(2,2))/2 = (1.5, 1), ḡ⁻ = (0, 1).
    g_plus, g_minus = outcome_mean_gradients(torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]),
                                             torch.tensor([1.0, 0.0, 1.0]))
    assert torch.equal(g_plus, torch.tensor([1.5, 1.0])) and torch.equal(g_minus, torch.tensor([0.0, 1.0]))


# --- the grpo estimator's std_power knob --------------------------------------------------------

def _grpo_adv(rewards: list[float], **params) -> torch.Tensor:
    n = len(rewards)
    inp = AdvantageInputs(rewards=torch.tensor(rewards).unsqueeze(1), mask=torch.ones(n, 1, dtype=torch.bool),
                          group_ids=torch.zeros(n, dtype=torch.long))
    return build("advantage", "grpo", **params)(inp).advantages[:, 0]


def test_std_power_reductions():
    r = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    # β = 1 is the default GRPO bit for bit; β = 0 divides by (σ+eps)^0 = 1, i.e. Dr. GRPO.
    assert torch.equal(_grpo_adv(r, std_power=1.0), _grpo_adv(r))
    assert torch.equal(_grpo_adv(r, std_power=0.0), _grpo_adv(r, scale="none"))
    # β = 0.5, k=3 of 8, ddof=0: σ = sqrt(15)/8 = 0.484123, A(correct) = (1 − 3/8)/sqrt(σ) = 0.898250.
    a = _grpo_adv(r, std_power=0.5, ddof=0, eps=0.0)
    assert a[0].item() == pytest.approx(0.625 / math.sqrt(math.sqrt(15) / 8), rel=1e-6)
    with pytest.raises(ValueError, match="std_power"):
        build("advantage", "grpo", std_power=-1.0)


@pytest.mark.parametrize("beta, ddof", [(1.0, 0), (1.0, 1), (0.0, 0), (0.5, 0), (0.5, 1)])
@pytest.mark.parametrize("k", [0, 1, 3, 4, 8])
def test_estimator_matches_dial_algebra(k, beta, ddof):
    # (1/G) Σ A_i g_i for the estimator's advantages on random per-sequence "gradients" equals
    # dial_coefficient · (ḡ⁺ − ḡ⁻): the algebraic identity, independent of the model.
    g = torch.randn(8, 5, generator=torch.Generator().manual_seed(k), dtype=torch.float64)
    r = [1.0] * k + [0.0] * (8 - k)
    adv = _grpo_adv(r, std_power=beta, ddof=ddof, eps=1e-6)
    g_plus, g_minus = outcome_mean_gradients(g, torch.tensor(r))
    coef = dial_coefficient(k, 8, std_power=beta, ddof=ddof, eps=1e-6)
    torch.testing.assert_close(group_policy_gradient(g, adv), coef * (g_plus - g_minus), rtol=1e-5, atol=1e-7)


# --- the identity on a tiny model with the real objective ---------------------------------------

G, T = 8, 5
LENGTHS = [5, 3, 4, 2, 5, 1, 3, 4]  # variable lengths: the sequence-level identity still holds


@pytest.fixture(scope="module")
def tiny():
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=32, layers=1, seed=3).double()
    prompt = tok("7+5=", return_tensors="pt")["input_ids"]  # (1, P) with <bos>
    gen = torch.Generator().manual_seed(0)
    completions = torch.randint(4, len(tok), (G, T), generator=gen)  # (G, T) random character tokens
    ids = torch.cat([prompt.expand(G, -1), completions], dim=1)  # (G, P + T)
    mask = torch.arange(T).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)  # (G, T) right padding
    params = list(model.parameters())

    def logprobs() -> torch.Tensor:  # (G, T) float64 log π of each completion token
        logits = model(ids).logits[:, prompt.shape[1] - 1:-1]  # (G, T, V): position t predicts token t
        return torch.log_softmax(logits, -1).gather(-1, completions.unsqueeze(-1)).squeeze(-1)

    def flat_grad(scalar: torch.Tensor) -> torch.Tensor:  # (P,) over all parameters
        grads = torch.autograd.grad(scalar, params, retain_graph=True, allow_unused=True)
        return torch.cat([(torch.zeros_like(p) if gr is None else gr).reshape(-1) for p, gr in zip(params, grads)])

    lp = logprobs()
    per_seq = torch.stack([flat_grad((lp[i] * mask[i]).sum()) for i in range(G)])  # (G, P): ∇ log π(o_i)
    return {"logprobs": logprobs, "flat_grad": flat_grad, "mask": mask, "per_seq": per_seq}


def _objective_grad(tiny, rewards: torch.Tensor, name: str, **params) -> torch.Tensor:
    """−∇ of the rlvr objective: on-policy ppo_clip + seq-mean-token-sum (per-row weight 1/G on every token)."""
    mask = tiny["mask"]
    inp = AdvantageInputs(rewards=rewards.unsqueeze(1), mask=mask, group_ids=torch.zeros(G, dtype=torch.long))
    adv = build("advantage", name, **params)(inp).advantages.double()  # (G, T)
    lp = tiny["logprobs"]()
    objective = Objective(build("loss", "ppo_clip"), aggregation=Aggregation(mode="seq-mean-token-sum"))
    loss, _ = objective(LossInputs(logprobs=lp, old_logprobs=lp.detach(), advantages=adv, mask=mask))
    return -tiny["flat_grad"](loss)


def _assert_vectors_close(actual: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-6) -> None:
    # Relative to the vector's norm: advantages are float32 (group_stats' output dtype), so single
    # tiny entries of the float64 gradient carry ~1e-7 of the norm in rounding.
    err = float((actual - expected).norm() / expected.norm())
    assert err < rtol, f"relative error {err:.3g}"


@pytest.mark.parametrize("k", [1, 3, 4])
def test_identity_against_autograd(tiny, k):
    # On-policy ρ = 1, so −∇loss = (1/G) Σ_i A_i Σ_t ∇log π_it = (1/G) Σ_i A_i ∇log π(o_i)
    # = coefficient · (ḡ⁺ − ḡ⁻): σ (GRPO, ddof=0), σ² (Dr. GRPO), σ·sqrt(7/8) (ddof=1), σ^1.5 (β=½).
    rewards = torch.tensor([1.0] * k + [0.0] * (G - k))[torch.tensor([3, 0, 6, 1, 7, 2, 5, 4])]
    g_plus, g_minus = outcome_mean_gradients(tiny["per_seq"], rewards)
    diff = g_plus - g_minus  # (P,)
    sigma = math.sqrt(k * (G - k)) / G
    grpo = _objective_grad(tiny, rewards, "grpo", ddof=0, eps=0.0)
    dr = _objective_grad(tiny, rewards, "dr_grpo")
    _assert_vectors_close(grpo, sigma * diff)
    _assert_vectors_close(dr, sigma ** 2 * diff)
    _assert_vectors_close(grpo * sigma, dr)  # the ratio of the two gradients is σ
    unbiased = _objective_grad(tiny, rewards, "grpo", ddof=1, eps=0.0)
    _assert_vectors_close(unbiased, sigma * math.sqrt((G - 1) / G) * diff)
    half = _objective_grad(tiny, rewards, "grpo", ddof=0, eps=0.0, std_power=0.5)
    _assert_vectors_close(half, sigma ** 1.5 * diff)
    assert diff.norm() > 1e-3  # the check is not vacuous: the two outcome means differ


@pytest.mark.parametrize("k", [0, G])
def test_unanimous_group_is_silent_and_filtered(tiny, k):
    # σ = 0: centred rewards are exactly 0 → zero gradient under GRPO and Dr. GRPO; DAPO drops the group.
    rewards = torch.full((G,), float(k == G))
    assert torch.equal(_objective_grad(tiny, rewards, "grpo"), torch.zeros_like(tiny["per_seq"][0]))
    assert torch.equal(_objective_grad(tiny, rewards, "dr_grpo"), torch.zeros_like(tiny["per_seq"][0]))
    assert not keep_groups_mask(rewards, torch.zeros(G, dtype=torch.long)).any()
    assert dapo_coefficient(k, G) == 0.0
