"""Properties every advantage estimator shares: masked tokens get 0, group layout and labels do not
matter, untrained positions change nothing; input errors; plug-in conventions."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlvr import AdvantageInputs, BatchError, build, get, names
from rlvr.registry import RegistryError

ESTIMATORS = ["grpo", "dr_grpo", "rloo", "gae", "reinforce_pp", "reinforce_pp_baseline", "gdpo"]


def batch(seed: int = 0, k: int = 2) -> AdvantageInputs:
    """Groups of sizes 3, 2, 1, contiguous; a right-padded mask with an untrained hole."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 1, 1], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]).bool()
    return AdvantageInputs(
        rewards=torch.randn(6, k, generator=g), mask=mask, group_ids=torch.tensor([0, 0, 0, 1, 1, 2]),
        values=torch.randn(6, 4, generator=g), reward_weights=torch.tensor([1.0, 0.5])[:k])


def run(name: str, inp: AdvantageInputs) -> torch.Tensor:
    return build("advantage", name)(inp).advantages


def test_all_estimators_registered():
    assert set(ESTIMATORS) <= set(names("advantage"))


@pytest.mark.parametrize("name", ESTIMATORS)
def test_masked_tokens_get_zero_advantage(name):
    inp = batch()
    out = run(name, inp)
    assert out.shape == inp.mask.shape
    assert (out[~inp.mask] == 0).all()
    assert (out[inp.mask] != 0).any()  # the check above is not vacuous


@pytest.mark.parametrize("name", ESTIMATORS)
def test_values_at_untrained_positions_change_nothing(name):
    inp = batch()
    noisy = dataclasses.replace(inp, values=torch.where(inp.mask, inp.values, torch.full_like(inp.values, 99.0)))
    torch.testing.assert_close(run(name, noisy), run(name, inp))


@pytest.mark.parametrize("name", ESTIMATORS)
def test_non_contiguous_groups_match_contiguous_after_permutation(name):
    inp = batch(1)
    perm = torch.tensor([4, 0, 5, 2, 3, 1])  # interleaves the groups
    shuffled = AdvantageInputs(rewards=inp.rewards[perm], mask=inp.mask[perm], group_ids=inp.group_ids[perm],
                               values=inp.values[perm], reward_weights=inp.reward_weights)
    torch.testing.assert_close(run(name, shuffled), run(name, inp)[perm])


@pytest.mark.parametrize("name", ESTIMATORS)
def test_group_labels_do_not_matter(name):
    inp = batch(2)
    relabelled = dataclasses.replace(inp, group_ids=torch.tensor([70, 70, 70, -3, -3, 12]))
    assert torch.equal(run(name, relabelled), run(name, inp))


@pytest.mark.parametrize("name", ["grpo", "rloo", "gdpo", "reinforce_pp_baseline"])
def test_group_estimators_depend_on_grouping(name):
    # Merging two groups changes the baseline, so the grouping is really used (guards the tests above).
    inp = batch(3)
    merged = dataclasses.replace(inp, group_ids=torch.tensor([0, 0, 0, 0, 0, 2]))
    assert not torch.allclose(run(name, merged), run(name, inp))


# --- input errors (AdvantageInputs validates; estimators add their own) -----------------------

def test_nan_reward_raises():
    with pytest.raises(BatchError, match="rewards.*NaN"):
        AdvantageInputs(torch.tensor([[1.0], [float("nan")]]), torch.ones(2, 1, dtype=torch.bool), torch.tensor([0, 0]))


def test_inf_token_reward_raises():
    with pytest.raises(BatchError, match="token_rewards"):
        AdvantageInputs(torch.zeros(2, 1), torch.ones(2, 2, dtype=torch.bool), torch.tensor([0, 0]),
                        token_rewards=torch.tensor([[0.0, float("inf")], [0.0, 0.0]]))


@pytest.mark.parametrize("field,value,match", [
    ("rewards", torch.zeros(3, 1), "rewards"),
    ("rewards", torch.zeros(2), "rewards"),
    ("group_ids", torch.tensor([0, 0, 0]), "group_ids"),
    ("values", torch.zeros(2, 3), "values"),
    ("token_rewards", torch.zeros(2), "token_rewards"),
    ("reward_weights", torch.ones(3), "reward_weights"),
])
def test_mismatched_shapes_raise(field, value, match):
    ok = dict(rewards=torch.zeros(2, 1), mask=torch.ones(2, 2, dtype=torch.bool), group_ids=torch.tensor([0, 0]))
    AdvantageInputs(**ok)  # the baseline record is valid
    with pytest.raises(BatchError, match=match):
        AdvantageInputs(**{**ok, field: value})


@pytest.mark.parametrize("mask", [torch.ones(2, 2), torch.ones(2, 2, dtype=torch.long)])
def test_non_bool_mask_raises(mask):
    with pytest.raises(BatchError, match="bool"):
        AdvantageInputs(torch.zeros(2, 1), mask, torch.tensor([0, 0]))


def test_missing_values_for_gae_raises():
    inp = dataclasses.replace(batch(), values=None)
    with pytest.raises(BatchError, match="values"):
        run("gae", inp)


@pytest.mark.parametrize("name,params", [
    ("grpo", {"scale": "global"}), ("rloo", {"singleton": "drop"}), ("gdpo", {"whiten": "rows"}),
    ("gae", {"returns": "lambda"}),
])
def test_bad_config_values_raise(name, params):
    with pytest.raises(ValueError):
        build("advantage", name, **params)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_unknown_config_key_raises(name):
    with pytest.raises(RegistryError, match="unknown parameter"):
        build("advantage", name, gama=0.9)


# --- plug-in conventions ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ESTIMATORS)
def test_plugin_conventions(name):
    cls = get("advantage", name)
    assert "(arXiv:" in cls.paper
    doc = cls.__doc__ or ""
    assert "Differs from" in doc and "Shapes" in doc and "Equation" in doc
    config = cls.Config
    assert config.__dataclass_params__.frozen
    for f in dataclasses.fields(config):
        assert f.metadata.get("help"), f"{name}.{f.name} has no help line"
