"""taco: golden weights from the authors' code, reductions, sign and mask invariances, metrics."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.registry import RegistryError, build, names
from rlvr.types import BatchError
from rlvr.weighting import WeightingInputs
from rlvr.weighting.taco import TACO, TACOConfig, tail_risk, tail_weights

# The docs/methods.md §2.26 (d) cases, α = 0.01, λ = 0.9 (ln α = −4.605170):
#   p = 1e-3, H = 1.0 → r = 6.907755 − 1 − 4.605170 = 1.302585 > 0
#                      → w = 1 − 0.9·(1 − e^{−1.302585}) = 1 − 0.9·(1 − 0.271828) = 0.344645
#   p = 0.5,  H = 1.0 → r = 0.693147 − 1 − 4.605170 = −4.912023 ≤ 0 → w = 1
#   p = 1e-3, H = 3.0 → r = 6.907755 − 3 − 4.605170 = −0.697415 ≤ 0 → w = 1 (exploration)
#   p = 1e-6, H = 0.1 → r = 13.815511 − 0.1 − 4.605170 = 9.110340
#                      → w = 1 − 0.9·(1 − e^{−9.110340}) = 0.1 + 0.9·1.1052e-4 = 0.100099
P = torch.tensor([[1e-3, 0.5, 1e-3, 1e-6]], dtype=torch.float64)
H = torch.tensor([[1.0, 1.0, 3.0, 0.1]], dtype=torch.float64)
W = [0.344645364561314, 1.0, 1.0, 0.10009946538262682]


def _inputs(adv, mask=None, logp=None, ent=None):
    adv = torch.as_tensor(adv, dtype=torch.float64)
    mask = torch.ones(adv.shape, dtype=torch.bool) if mask is None else torch.as_tensor(mask)
    logp = P.log().expand_as(adv) if logp is None else logp
    ent = H.expand_as(adv) if ent is None else ent
    return WeightingInputs(advantages=adv, mask=mask, logprobs=logp, entropy=ent)


def test_registered_with_code_defaults():
    assert "taco" in names("weighting")
    w = build("weighting", "taco")
    assert (w.config.alpha, w.config.lam) == (0.01, 0.9)
    assert not w.needs_answer_mask


def test_golden_tail_risk_and_weights():
    risk = tail_risk(P.log(), H, torch.ones(1, 4, dtype=torch.bool), alpha=0.01)
    expected_r = [1.302585092994046, -4.9120230054281455, -0.6974149070059541, 9.110340371976182]
    torch.testing.assert_close(risk[0], torch.tensor(expected_r, dtype=torch.float64))
    torch.testing.assert_close(tail_weights(risk, lam=0.9)[0], torch.tensor(W, dtype=torch.float64))


def test_golden_positive_advantages_scaled_negative_untouched():
    # row 0: A = +2 everywhere → 2·w; row 1: A = −1 everywhere → unchanged (−1), even on risky tokens.
    out = TACO()(_inputs([[2.0] * 4, [-1.0] * 4]))
    torch.testing.assert_close(out.advantages[0], 2 * torch.tensor(W, dtype=torch.float64))
    torch.testing.assert_close(out.advantages[1], torch.full((4,), -1.0, dtype=torch.float64))


def test_masked_tokens_untouched_and_not_risky():
    # Tokens 0 and 3 are risky with A > 0 but untrained: they keep A; the trained risky token would not.
    mask = [[False, True, True, False]]
    out = TACO()(_inputs([[3.0, 3.0, 3.0, 3.0]], mask=mask))
    assert out.advantages.tolist() == [[3.0, 3.0, 3.0, 3.0]]
    risk = tail_risk(P.log(), H, torch.tensor(mask), alpha=0.01)
    assert risk[0, 0] == 0 and risk[0, 3] == 0  # r_tail is 0 on untrained tokens (authors' code)
    assert TACO()(_inputs([[3.0] * 4])).advantages[0, 0] < 3.0  # the same token trained is reweighted


def test_zero_advantage_stays_zero():
    out = TACO()(_inputs([[0.0] * 4]))
    assert out.advantages.tolist() == [[0.0] * 4]


def test_lambda_zero_is_identity():
    g = torch.Generator().manual_seed(0)
    adv = torch.randn(3, 5, generator=g, dtype=torch.float64)
    logp = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 20  # many tail tokens
    ent = torch.rand(3, 5, generator=g, dtype=torch.float64)
    inputs = _inputs(adv, logp=logp, ent=ent)
    assert torch.equal(build("weighting", "taco", lam=0.0)(inputs).advantages, adv)
    # and the default λ does change something on this batch, so the identity above is not vacuous
    assert not torch.equal(TACO()(inputs).advantages, adv)


def test_weight_bounds_and_lambda_one():
    # A′/A ∈ (1 − λ, 1] on positive advantages; λ = 1 gives w = e^{−r} on risky tokens.
    g = torch.Generator().manual_seed(1)
    logp = -torch.rand(4, 6, generator=g, dtype=torch.float64) * 25
    ent = torch.rand(4, 6, generator=g, dtype=torch.float64) * 2
    adv = torch.ones(4, 6, dtype=torch.float64)
    inputs = _inputs(adv, logp=logp, ent=ent)
    ratio = build("weighting", "taco", lam=0.5)(inputs).advantages
    assert bool((ratio > 0.5).all()) and bool((ratio <= 1.0).all()) and bool((ratio < 1.0).any())
    risk = -logp - ent + math.log(0.01)
    full = build("weighting", "taco", lam=1.0)(inputs).advantages
    torch.testing.assert_close(full, torch.where(risk > 0, torch.exp(-risk), torch.ones_like(risk)))


def test_threshold_is_alpha_exp_minus_entropy():
    # risky iff p < α·e^{−H}: with α = 0.01, H = 1 the threshold is 0.01·e^{−1} = 3.6788e-3.
    thr = 0.01 * math.exp(-1.0)
    logp = torch.tensor([[math.log(thr * 0.99), math.log(thr * 1.01)]], dtype=torch.float64)
    out = TACO()(_inputs([[1.0, 1.0]], logp=logp, ent=torch.ones(1, 2, dtype=torch.float64)))
    assert out.advantages[0, 0] < 1.0 and out.advantages[0, 1] == 1.0
    # a larger α raises the threshold: α = 0.1 makes the second token risky too
    out = build("weighting", "taco", alpha=0.1)(_inputs([[1.0, 1.0]], logp=logp,
                                                        ent=torch.ones(1, 2, dtype=torch.float64)))
    assert out.advantages[0, 1] < 1.0


def test_metrics_golden():
    # trained: row 0 tokens 0..3 (A = +2) and row 1 tokens 0, 1 (A = −1); row 1 tokens 2, 3 untrained.
    # weights on the six trained tokens: [0.344645, 1, 1, 0.100099, 0.344645, 1] → mean 3.789345/6
    # tail tokens (r > 0): row 0 tokens 0, 3 and row 1 token 0 → 3/6; positive A: 4/6;
    # reweighted (tail and A > 0): 2/6; tail risk mean: (2·1.302585 − 4.912023 − 0.697415 +
    # 9.110340 − 4.912023)/6 = 1.194049/6
    mask = [[True] * 4, [True, True, False, False]]
    m = TACO()(_inputs([[2.0] * 4, [-1.0] * 4], mask=mask)).metrics
    assert m["taco_weight_mean"].item() == pytest.approx((2 * W[0] + 3 + W[3]) / 6)
    assert m["taco_tail_token_frac"].item() == pytest.approx(3 / 6)
    assert m["taco_positive_adv_frac"].item() == pytest.approx(4 / 6)
    assert m["taco_reweighted_frac"].item() == pytest.approx(2 / 6)
    r = [1.302585092994046, -4.9120230054281455, -0.6974149070059541, 9.110340371976182]
    assert m["taco_tail_risk_mean"].item() == pytest.approx((2 * r[0] + r[1] + r[2] + r[3] + r[1]) / 6)


def test_no_gradient_flows_through_the_weights():
    logp = P.log().clone().requires_grad_(True)
    out = TACO()(_inputs([[1.0] * 4], logp=logp))
    assert not out.advantages.requires_grad


def test_errors():
    with pytest.raises(ValueError, match="alpha"):
        TACOConfig(alpha=0.0)
    with pytest.raises(ValueError, match="lam"):
        TACOConfig(lam=1.5)
    with pytest.raises(RegistryError, match="valid"):
        build("weighting", "taco", lamda=0.5)
    adv = torch.ones(1, 2)
    with pytest.raises(BatchError, match="entropy"):
        TACO()(WeightingInputs(advantages=adv, mask=torch.ones(1, 2, dtype=torch.bool), logprobs=adv))
