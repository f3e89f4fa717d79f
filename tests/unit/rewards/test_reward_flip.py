"""reward_flip, the positive controls' harm: the fraction flipped equals the rate, flips are 1 - r on the
chosen rows only, the verdict is kept, the draw depends on (seed, call) and survives a resume."""

from __future__ import annotations

import pytest
import torch

from rlvr import BatchError, Problem, Rollouts, build
from rlvr.rewards.flip import flip_rows
from rlvr.train.build import build_pipeline


def batch(verdicts) -> Rollouts:
    n = len(verdicts)
    return Rollouts(problems=[Problem(prompt=f"p{i // 4}") for i in range(n)],
                    prompt_ids=torch.zeros(n, 1, dtype=torch.long), prompt_mask=torch.ones(n, 1, dtype=torch.bool),
                    completion_ids=torch.ones(n, 3, dtype=torch.long),
                    completion_mask=torch.ones(n, 3, dtype=torch.bool),
                    group_ids=torch.arange(n) // 4, rewards=torch.tensor(verdicts, dtype=torch.float32)[:, None],
                    reward_names=["correct"], texts=["x"] * n)


VERDICTS = [1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1]  # N = 32


@pytest.mark.parametrize("rate", [0.0, 0.25, 0.5, 1.0])
def test_fraction_flipped_equals_the_rate_on_a_fixed_batch(rate):
    out = build("shaper", "reward_flip", rate=rate, seed=7)(batch(VERDICTS))
    before = torch.tensor(VERDICTS, dtype=torch.float32)
    changed = out.rewards[:, 0] != before  # binary rewards: a flip always changes the value
    assert int(changed.sum()) == round(rate * len(VERDICTS))
    assert out.meta["shaper_metrics"]["reward/flipped_frac"] == pytest.approx(round(rate * 32) / 32)
    assert torch.equal(out.rewards[changed, 0], 1.0 - before[changed])  # a flip is 1 - r
    assert out.reward_names == ["flipped", "correct"]
    assert torch.equal(out.rewards[:, 1], before)  # the verdict is kept, unflipped


def test_flipped_rows_depend_on_seed_and_call_only():
    first, again = flip_rows(32, 0.25, seed=3, call=0), flip_rows(32, 0.25, seed=3, call=0)
    assert torch.equal(first, again)
    assert not torch.equal(first, flip_rows(32, 0.25, seed=3, call=1))  # a new batch, new rows
    assert not torch.equal(first, flip_rows(32, 0.25, seed=4, call=0))  # another RL seed, new rows


def test_a_resumed_shaper_flips_the_rows_an_uninterrupted_one_would():
    steady = build("shaper", "reward_flip", rate=0.25, seed=1)
    outputs = [steady(batch(VERDICTS)).rewards[:, 0] for _ in range(3)]
    resumed = build("shaper", "reward_flip", rate=0.25, seed=1)
    resumed(batch(VERDICTS))
    state = resumed.state_dict()
    fresh = build("shaper", "reward_flip", rate=0.25, seed=1)
    fresh.load_state_dict(state)
    assert torch.equal(fresh(batch(VERDICTS)).rewards[:, 0], outputs[1])


def test_bad_rate_and_non_binary_rewards_are_refused():
    with pytest.raises(ValueError, match="rate must be in"):
        build("shaper", "reward_flip", rate=1.5)
    with pytest.raises(BatchError, match="must lie in"):
        build("shaper", "reward_flip", rate=0.5, seed=0)(batch([2.0, 0.0, 1.0, 0.0]))


def test_seed_defaults_to_the_runs_rl_seed(tmp_path):
    from tests.helpers.tiny import tiny_config
    cfg = tiny_config(tmp_path, ["run.seed=2", "run.rl_seed=1002", "algorithm.shapers=[{name: reward_flip}]"])
    shaper = build_pipeline(cfg).shapers[0]
    assert shaper.config.seed == 1002 and shaper.config.rate == 0.25
