"""Batch statistics under data parallelism (issue 18): an estimator that needs the global batch
(SA-MRPO's saturation, TETHER's w, CVPO's mean value variance, FADE's mean entropy, and every batch
whitening or batch std: GAE, REINFORCE++, GDPO, GRPO's ``scale='batch'``, SA-MRPO's ``batch_whiten``) reads the summed
``batch_stats`` of every shard through ``AdvantageInputs.global_stats``; each shard then gets exactly the
full batch's advantages. Without them each shard uses its own statistics (the old, per-rank behaviour)."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr import AdvantageInputs, build
from rlvr.train.movement import kl_new_old


def _batch(weights: bool) -> AdvantageInputs:
    """12 rows in 4 groups of 3; uneven lengths; two objectives in [0, 1]; values near the outcome (so
    TETHER's w is inside (0, 1)) and entropies; objective weights only for SA-MRPO's base weights."""
    g = torch.Generator().manual_seed(7)
    lengths = torch.tensor([2, 5, 3, 6, 1, 4, 6, 2, 5, 3, 4, 6])
    mask = torch.arange(6).unsqueeze(0) < lengths.unsqueeze(1)  # (12, 6)
    rewards = torch.stack([(torch.rand(12, generator=g) > 0.4).float(), torch.rand(12, generator=g)], dim=1)
    values = rewards[:, :1] + 0.4 * (torch.rand(12, 6, generator=g) - 0.5)  # (12, 6)
    return AdvantageInputs(rewards=rewards, mask=mask, group_ids=torch.arange(4).repeat_interleave(3),
                           values=values, entropy=torch.rand(12, 6, generator=g) * 3,
                           reward_weights=torch.tensor([1.0, 0.5]) if weights else None)


def _shard(inputs: AdvantageInputs, rows: slice) -> AdvantageInputs:
    fields = ("rewards", "mask", "group_ids", "values", "entropy")
    return AdvantageInputs(**{f: getattr(inputs, f)[rows] for f in fields}, reward_weights=inputs.reward_weights)


ESTIMATORS = [("sa_mrpo", {}), ("tether", {}), ("cvpo", {}), ("fade", {"entropy_target": 2.0}),
              # batch whitening / batch std: Σ, Σ², count of what is normalised
              ("gae", {"lam": 0.9, "gamma": 0.95}), ("reinforce_pp", {"gamma": 0.9}), ("reinforce_pp_baseline", {}),
              ("gdpo", {}), ("gdpo", {"whiten": "sequences"}), ("grpo", {"scale": "batch"}),
              ("sa_mrpo", {"batch_whiten": True, "saturation_gamma": 2.0}),
              ("cvpo", {"parent": "gae", "parent_params": {"lam": 0.9}})]


@pytest.mark.parametrize("name, params", ESTIMATORS)
def test_shards_with_global_stats_equal_the_full_batch(name, params):
    full = _batch(weights=name in ("sa_mrpo", "gdpo"))
    expected = build("advantage", name, **params)(full).advantages  # (12, 6)
    shards = [_shard(full, slice(0, 6)), _shard(full, slice(6, 12))]  # whole groups per shard
    est = build("advantage", name, **params)
    local = [est.batch_stats(s) for s in shards]
    total = {k: local[0][k] + local[1][k] for k in local[0]}
    assert total  # the estimator declares statistics
    got = []
    for s in shards:
        s.global_stats = total
        got.append(build("advantage", name, **params)(s).advantages)
    torch.testing.assert_close(torch.cat(got), expected, rtol=1e-5, atol=1e-6)
    alone = torch.cat([build("advantage", name, **params)(_shard(full, sl)).advantages
                       for sl in (slice(0, 6), slice(6, 12))])
    assert not torch.allclose(alone, expected, atol=1e-4)  # per-shard statistics give other advantages


def test_kl_new_old_golden():
    # log ρ = 0.1 and −0.2 on trained tokens (the third is masked): ρ log ρ − (ρ − 1) =
    # e^0.1·0.1 − (e^0.1 − 1) = 0.0052542 and e^−0.2·(−0.2) − (e^−0.2 − 1) = 0.0175231; count 2.
    new = torch.tensor([[0.1, -0.2, 5.0]])
    total, count = kl_new_old(new, torch.zeros(1, 3), torch.tensor([[True, True, False]]))
    f = lambda x: math.exp(x) * x - (math.exp(x) - 1)  # noqa: E731
    assert float(total) == pytest.approx(f(0.1) + f(-0.2), rel=1e-6) and float(count) == 2.0
    assert float(kl_new_old(new, new, torch.ones(1, 3, dtype=torch.bool))[0]) == 0.0


def test_cliff_and_cvpo_pass_their_inner_estimators_statistics():
    # Cliff's GRPO (scale='batch') and CVPO's parent (gae) read their own keys of the summed statistics.
    full = _batch(weights=False)
    grpo = build("advantage", "grpo", scale="batch").batch_stats(full)
    cliff = build("advantage", "cliff", scale="batch").batch_stats(full)
    assert grpo.keys() == cliff.keys() == {"whiten_sum", "whiten_sq", "whiten_count"}
    assert all(torch.equal(grpo[k], cliff[k]) for k in grpo)
    assert build("advantage", "cliff", scale="batch", mode="replace").batch_stats(full) == {}
    cvpo = build("advantage", "cvpo", parent="gae").batch_stats(full)
    gae = build("advantage", "gae").batch_stats(full)
    assert all(torch.equal(cvpo[f"parent.{k}"], gae[k]) for k in gae) and "nu_sum" in cvpo


def test_one_process_whitening_is_unchanged_bit_for_bit():
    # Without summed statistics the local two-pass masked_whiten runs, as before this change.
    from rlvr.ops import masked_whiten
    full = _batch(weights=False)
    est = build("advantage", "reinforce_pp", gamma=0.9)
    returns = est(full).returns
    assert torch.equal(est(full).advantages, masked_whiten(returns, full.mask) * full.mask)
