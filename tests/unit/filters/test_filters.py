"""The zero-std group filter (DAPO dynamic sampling) and its keep_groups_mask function."""

from __future__ import annotations

import pytest
import torch

from rlvr import BatchError, Problem, Rollouts, build
from rlvr.filters import keep_groups_mask
from rlvr.registry import RegistryError


def rollouts(rewards, groups, names=("acc",), token_rewards=None) -> Rollouts:
    r = torch.tensor(rewards, dtype=torch.float32)
    r = r.unsqueeze(1) if r.dim() == 1 else r
    n = r.shape[0]
    mask = torch.ones(n, 2, dtype=torch.bool)
    mask[0, 1] = False
    return Rollouts(
        problems=[Problem(prompt=f"p{g}", uid=str(g)) for g in groups],
        prompt_ids=torch.zeros(n, 1, dtype=torch.long), prompt_mask=torch.ones(n, 1, dtype=torch.bool),
        completion_ids=torch.arange(2 * n).view(n, 2), completion_mask=mask,
        group_ids=torch.tensor(groups), rewards=r, reward_names=list(names),
        token_rewards=token_rewards, texts=[f"t{i}" for i in range(n)], meta={"step": 3},
        parsed=[f"a{i}" for i in range(n)], verifier_errors=["" if i % 2 else f"e{i}" for i in range(n)])


# --- keep_groups_mask -------------------------------------------------------------------------

def test_keep_groups_mask_dapo_examples():
    # docs/methods.md §1.3: [1,1,1,1] dropped (std 0), [1,0,1,1] kept (std 0.433 > 0).
    scores = torch.tensor([1.0, 1, 1, 1, 1, 0, 1, 1])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    assert keep_groups_mask(scores, groups).tolist() == [False] * 4 + [True] * 4


def test_keep_groups_mask_singleton_kept_and_non_contiguous():
    # group 7 = rows 0, 3 (equal → dropped), group 2 = rows 1, 4 (differ → kept), group 5 = row 2 (alone → kept)
    keep = keep_groups_mask(torch.tensor([0.5, 0.0, 3.0, 0.5, 1.0]), torch.tensor([7, 2, 5, 7, 2]))
    assert keep.tolist() == [False, True, True, False, True]


def test_keep_groups_mask_tolerance():
    # (0, 0.1): population std 0.05 → kept at tol 0 and 0.04, dropped at tol 0.06.
    scores, groups = torch.tensor([0.0, 0.1]), torch.tensor([0, 0])
    assert keep_groups_mask(scores, groups).all()
    assert keep_groups_mask(scores, groups, tol=0.04).all()
    assert not keep_groups_mask(scores, groups, tol=0.06).any()
    # unbiased std 0.0707 > 0.06 → kept with ddof=1
    assert keep_groups_mask(scores, groups, tol=0.06, ddof=1).all()


# --- the filter plug-in -----------------------------------------------------------------------

def test_zero_std_filter_drops_whole_groups_and_slices_every_field():
    # groups: 4 → rows 0, 2 (1, 1: dropped); 9 → rows 1, 3 (0, 1: kept); 6 → row 4 (alone: kept)
    batch = rollouts([1.0, 0.0, 1.0, 1.0, 0.0], [4, 9, 4, 9, 6])
    out = build("filter", "zero_std")(batch)
    assert out.group_ids.tolist() == [9, 9, 6]
    assert out.texts == ["t1", "t3", "t4"]
    assert out.parsed == ["a1", "a3", "a4"] and out.verifier_errors == ["", "", "e4"]  # each row's own
    assert [p.uid for p in out.problems] == ["9", "9", "6"]
    assert torch.equal(out.completion_ids, batch.completion_ids[[1, 3, 4]])
    assert torch.equal(out.rewards, batch.rewards[[1, 3, 4]])
    m = out.meta["shaper_metrics"]  # the one metrics channel of shapers and filters
    assert m["filter/zero_std_kept_groups"] == 2 and m["filter/zero_std_groups"] == 3
    assert out.meta["step"] == 3 and "shaper_metrics" not in batch.meta  # input untouched
    assert batch.num_rows == 5


def test_zero_std_filter_can_empty_the_batch():
    out = build("filter", "zero_std")(rollouts([1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1]))
    assert out.num_rows == 0 and out.meta["shaper_metrics"]["filter/zero_std_kept_groups"] == 0


def test_zero_std_filter_reward_column_by_name():
    # objective 'fmt' is constant in group 0, 'acc' is not: the choice of column decides.
    batch = rollouts([[1.0, 0.5], [0.0, 0.5], [1.0, 0.0], [1.0, 1.0]], [0, 0, 1, 1], names=("acc", "fmt"))
    assert build("filter", "zero_std", reward="acc")(batch).group_ids.tolist() == [0, 0]
    assert build("filter", "zero_std", reward="fmt")(batch).group_ids.tolist() == [1, 1]
    with pytest.raises(BatchError, match="len"):
        build("filter", "zero_std", reward="len")(batch)


def test_zero_std_filter_weighted_sum():
    # group 0 rows (1, 0.5), (0, 0.5); group 1 rows (1, 0), (0, 1).
    # weights (1, 1): group 0 sums (1.5, 0.5) → kept; group 1 sums (1, 1) → dropped.
    # weights (1, 2): group 0 (2, 1) kept; group 1 (1, 2) kept.
    batch = rollouts([[1.0, 0.5], [0.0, 0.5], [1.0, 0.0], [0.0, 1.0]], [0, 0, 1, 1], names=("a", "b"))
    assert build("filter", "zero_std", weights=[1.0, 1.0])(batch).group_ids.tolist() == [0, 0]
    assert build("filter", "zero_std", weights=[1.0, 2.0])(batch).group_ids.tolist() == [0, 0, 1, 1]
    # no weights: objective 0 alone, as the advantage estimators; group 1 (1, 0) kept
    assert build("filter", "zero_std")(batch).group_ids.tolist() == [0, 0, 1, 1]
    with pytest.raises(BatchError, match="weights"):
        build("filter", "zero_std", weights=[1.0])(batch)


def test_zero_std_filter_uses_token_rewards_on_trained_tokens():
    # Row 0's second token is untrained: its 5.0 must not count. Sums: (1, 1 | 0, 2) → group 0 dropped.
    tr = torch.tensor([[1.0, 5.0], [0.0, 1.0], [0.0, 0.0], [1.0, 1.0]])
    batch = rollouts([0.0, 0.0, 0.0, 0.0], [0, 0, 1, 1], token_rewards=tr)
    assert build("filter", "zero_std")(batch).group_ids.tolist() == [1, 1]


def test_zero_std_filter_needs_rewards():
    batch = rollouts([1.0, 0.0], [0, 0])
    batch.rewards = None
    with pytest.raises(BatchError, match="rewards"):
        build("filter", "zero_std")(batch)


def test_zero_std_filter_config_errors():
    with pytest.raises(RegistryError, match="tolerance"):
        build("filter", "zero_std", tolerance=0.1)
    cls = build("filter", "zero_std")
    assert "(arXiv:2503.14476)" in cls.paper and "Differs from" in type(cls).__doc__
