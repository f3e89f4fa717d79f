"""Length bias of the L^(α−1) family (rlvr.analysis.length_bias, docs/methods.md §2.18): golden weights,
the two ends of the family, consistency with rlvr.aggregation, and the P1/P2 trade-off with exact
expectations over a small discrete bandit run through the real ppo_clip loss and aggregation."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from rlvr import build
from rlvr.aggregation import aggregate, token_weights
from rlvr.analysis.length_bias import (
    length_bias_report, lengths_to_mask, per_token_weight, trajectory_weight,
)
from rlvr.types import LossInputs

L = torch.tensor([10, 40])


@pytest.mark.parametrize("alpha, per_token, per_trajectory", [
    # docs/methods.md §2.18 test 1, L = [10, 40], no normaliser: per token L^(α−1), per trajectory L^α.
    (0.0, [0.1, 0.025], [1.0, 1.0]),  # 1/10, 1/40; 10^0 = 40^0 = 1
    (0.5, [0.316228, 0.158114], [3.162278, 6.324555]),  # 10^−½, 40^−½; 10^½, 40^½
    (1.0, [1.0, 1.0], [10.0, 40.0]),
])
def test_methods_test1_numbers(alpha, per_token, per_trajectory):
    expected_tok = torch.tensor(per_token, dtype=torch.float64)
    expected_traj = torch.tensor(per_trajectory, dtype=torch.float64)
    torch.testing.assert_close(per_token_weight(L, alpha), expected_tok, rtol=1e-6, atol=0)
    torch.testing.assert_close(trajectory_weight(L, alpha), expected_traj, rtol=1e-6, atol=0)
    report = length_bias_report(L, alpha=alpha)
    torch.testing.assert_close(report.trajectory_weight, expected_traj, rtol=1e-6, atol=0)
    # shares: α=0 → (½, ½); α=½ → (1/3, 2/3) since 6.32/3.16 = 2; α=1 → (1/5, 4/5)
    assert report.share[1].item() == pytest.approx({0.0: 0.5, 0.5: 2 / 3, 1.0: 0.8}[alpha], rel=1e-9)
    assert report.alpha == pytest.approx(alpha, abs=1e-9)  # two points: the log-log slope is α exactly
    assert report.dominance == pytest.approx(4.0 ** alpha, rel=1e-9)  # (40/10)^α


LENGTHS = torch.tensor([3, 1, 4, 2])


def test_alpha_zero_is_grpo_seq_mean_token_mean():
    # α = 0: every trajectory weighs 1/N = 1/4 in total, whatever its length (GRPO).
    report = length_bias_report(LENGTHS, mode="seq-mean-token-mean")
    torch.testing.assert_close(report.trajectory_weight, torch.full((4,), 0.25, dtype=torch.float64))
    torch.testing.assert_close(report.trajectory_weight, trajectory_weight(LENGTHS, 0.0) / 4)
    assert report.alpha == pytest.approx(0.0, abs=1e-6) and report.dominance == pytest.approx(1.0)


@pytest.mark.parametrize("mode, scale", [
    # α = 1: weight L_i/N for seq-mean-token-sum (3,1,4,2)/4; /T = 4 more for the -norm mode;
    # token-mean: L_i / Σ L = (3,1,4,2)/10.
    ("seq-mean-token-sum", 1 / 4), ("seq-mean-token-sum-norm", 1 / 16), ("token-mean", 1 / 10),
])
def test_alpha_one_is_weight_proportional_to_length(mode, scale):
    report = length_bias_report(LENGTHS, mode=mode)
    torch.testing.assert_close(report.trajectory_weight, LENGTHS.double() * scale, rtol=1e-6, atol=0)
    torch.testing.assert_close(report.share, LENGTHS.double() / 10, rtol=1e-6, atol=0)
    assert report.alpha == pytest.approx(1.0, abs=1e-6) and report.dominance == pytest.approx(4.0, rel=1e-6)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 1.0])
def test_consistent_with_aggregation_length_power(alpha):
    # token_weights(mode length-power) row sums = L^α / (N · T^α) with the default C = T^α, T = 6.
    mask = lengths_to_mask(LENGTHS, horizon=6)
    rows = token_weights(mask, "length-power", alpha=alpha).double().sum(-1)  # (N,)
    expected = trajectory_weight(LENGTHS, alpha, norm=6 ** alpha) / 4
    torch.testing.assert_close(rows, expected, rtol=1e-6, atol=0)
    report = length_bias_report(LENGTHS, mode="length-power", alpha=alpha, horizon=6)
    torch.testing.assert_close(report.trajectory_weight, expected, rtol=1e-6, atol=0)
    # the family's ends are the fixed modes: α = 0 ↔ seq-mean-token-mean, α = 1 ↔ seq-mean-token-sum(-norm)
    if alpha in (0.0, 1.0):
        fixed = "seq-mean-token-mean" if alpha == 0.0 else "seq-mean-token-sum-norm"
        torch.testing.assert_close(token_weights(mask, "length-power", alpha=alpha), token_weights(mask, fixed))


def test_rows_sorted_by_length_and_errors():
    rows = length_bias_report(LENGTHS, alpha=1.0).rows()
    assert [r["length"] for r in rows] == [1.0, 2.0, 3.0, 4.0]
    assert [r["trajectory_weight"] for r in rows] == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="give alpha"):
        length_bias_report(LENGTHS)
    with pytest.raises(ValueError, match="give alpha"):
        length_bias_report(LENGTHS, mode="token-mean", alpha=0.5)
    with pytest.raises(ValueError, match="give alpha"):
        length_bias_report(LENGTHS, mode="length-power")
    with pytest.raises(ValueError, match="at least one"):
        trajectory_weight(torch.tensor([2, 0]), 0.5)


# --- P1 / P2 on a toy bandit (docs/methods.md §2.18 test 3) -----------------------------------------------
# A three-step token bandit: vocabulary {a, b, <eos>}, position-dependent policy softmax(θ[t]),
# a trajectory ends at <eos> (counted as a trained token) or after 3 tokens, so lengths are 1, 2, 3:
# "E"; "aE", "bE"; and 12 of length 3 (two of {a,b}, then any of a, b, E): 15 trajectories, Σ π = 1.
# Outcome reward: 1 iff the trajectory holds exactly one "a". Expectations are exact sums over all 15.
A_, B_, EOS = 0, 1, 2


def _bandit() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    seqs = [[EOS]] + [[x, EOS] for x in (A_, B_)] + [[x, y, z] for x, y in itertools.product((A_, B_), repeat=2)
                                                    for z in (A_, B_, EOS)]
    tokens = torch.tensor([s + [EOS] * (3 - len(s)) for s in seqs])  # (15, 3), padding never trained
    mask = lengths_to_mask(torch.tensor([len(s) for s in seqs]), horizon=3)  # (15, 3)
    reward = torch.tensor([float(s.count(A_) == 1) for s in seqs], dtype=torch.float64)  # (15,)
    return tokens, mask, reward


def _token_logprobs(theta: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(theta, -1)  # (3 positions, 3 symbols)
    picked = logp[torch.arange(3).expand_as(tokens), tokens]  # (15, 3)
    return torch.where(mask, picked, torch.zeros_like(picked))


def _expected_update(alpha: float, baseline: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(E_o[−∇ loss(o)] under length-power α with C = 1, exact ∇E[r]), both (3, 3)."""
    tokens, mask, reward = _bandit()
    theta = torch.tensor([[0.3, -0.2, 0.1], [0.5, 0.0, -0.4], [-0.1, 0.2, 0.3]], dtype=torch.float64,
                         requires_grad=True)
    lp = _token_logprobs(theta, tokens, mask)  # (15, 3)
    prob = lp.sum(-1).exp()  # (15,) π(o)
    assert prob.sum().item() == pytest.approx(1.0, abs=1e-12)
    exact = torch.autograd.grad((prob * reward).sum(), theta, retain_graph=True)[0]
    adv = reward - (prob * reward).sum().detach() if baseline else reward  # constant baseline b = E[r]
    per_token = build("loss", "ppo_clip")(LossInputs(  # on-policy: ρ = 1, gradient −A ∇log π_t
        logprobs=lp, old_logprobs=lp.detach(), advantages=adv.unsqueeze(1).expand(-1, 3), mask=mask)).per_token
    w = token_weights(mask, "length-power", num_seqs=1, norm=1.0, alpha=alpha).double()  # each row a batch of one
    expected_loss = (prob.detach() * (w * per_token).sum(-1)).sum()  # E_o[loss(o)], π held fixed
    return -torch.autograd.grad(expected_loss, theta)[0], exact


@pytest.mark.parametrize("baseline", [False, True])
def test_p1_alpha_one_is_unbiased_alpha_zero_is_not(baseline):
    # α = 1: Σ_t ∇log π_t = ∇log π(o), so E[A ∇log π(o)] = ∇E[r] exactly (E[b ∇log π] = 0).
    update, exact = _expected_update(1.0, baseline)
    torch.testing.assert_close(update, exact, rtol=1e-10, atol=1e-12)
    # α = 0 (and ½): E[L^(α−1) A ∇log π(o)] weights short trajectories up: biased.
    for alpha in (0.0, 0.5):
        biased, _ = _expected_update(alpha, baseline)
        assert (biased - exact).norm() > 0.1 * exact.norm()


def test_p2_alpha_zero_is_length_invariant_alpha_one_is_not():
    # Stationary one-symbol policy softmax(φ): the trajectory "a"×L has L tokens with the same
    # gradient ∇log π(a), so its on-policy update under length-power (C = 1, a batch of one) is
    # A·L·L^(α−1)·∇log π(a) = A·L^α·∇log π(a): independent of L only at α = 0; ∝ L at α = 1.
    phi = torch.tensor([0.4, -0.3, 0.1], dtype=torch.float64, requires_grad=True)
    base = torch.autograd.grad(torch.log_softmax(phi, -1)[A_], phi)[0]  # ∇log π(a)

    def update(length: int, alpha: float) -> torch.Tensor:
        mask = torch.ones(1, length, dtype=torch.bool)
        lp = torch.log_softmax(phi, -1)[A_].expand(1, length)  # (1, L)
        per_token = build("loss", "ppo_clip")(LossInputs(
            logprobs=lp, old_logprobs=lp.detach(), advantages=torch.ones(1, length), mask=mask)).per_token
        return -torch.autograd.grad(aggregate(per_token, mask, "length-power", alpha=alpha, norm=1.0), phi)[0]

    for length in (1, 2, 4):
        torch.testing.assert_close(update(length, 0.0), base)  # P2: each trajectory counts once
        torch.testing.assert_close(update(length, 1.0), length * base)  # longer dominates ∝ L
        torch.testing.assert_close(update(length, 0.5), math.sqrt(length) * base)
    # the bandit's own trajectories: total weight Σ_t w_t is 1 for every length at α = 0, L at α = 1
    _, mask, _ = _bandit()
    lengths = mask.sum(-1).double()
    torch.testing.assert_close(token_weights(mask, "length-power", num_seqs=1, alpha=0.0).double().sum(-1),
                               torch.ones(15, dtype=torch.float64))
    torch.testing.assert_close(token_weights(mask, "length-power", num_seqs=1, norm=1.0, alpha=1.0).double().sum(-1),
                               lengths)
