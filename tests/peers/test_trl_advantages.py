"""rlvr's group advantages against TRL 1.16's GRPOTrainer and RLOOTrainer.

TRL computes advantages inline in ``_generate_and_score_completions`` (a method that also generates
and runs the models), with no callable of its own. These tests run TRL's *own source lines* for that
step: they cut the block from ``unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)`` to
``advantages = torch.nan_to_num(advantages, nan=0.0)`` out of the installed method with ``inspect``
and execute it on a stand-in ``self`` holding the attributes the block reads. In TRL 1.16 that is
``trl/trainer/grpo_trainer.py`` lines ~2759–2810 (``sum_then_normalize`` with
``scale_rewards`` = 'group' | 'batch' | 'none', and ``normalize_then_sum``) and
``trl/trainer/rloo_trainer.py`` lines ~1653–1697 (leave-one-out baseline, ``normalize_advantages``
off). If TRL rewrites the block, the markers vanish and the test fails instead of passing silently.

Conventions pinned to TRL's: unbiased std (``trl.trainer.utils.nanstd``, ddof=1), eps 1e-4 added
to the std, groups are contiguous blocks of ``num_generations`` rows (rlvr does not need that; one
test feeds rlvr a shuffled batch).
"""

from __future__ import annotations

import inspect
import textwrap
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("trl")
from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: E402
from trl.trainer.rloo_trainer import RLOOTrainer  # noqa: E402
from trl.trainer.utils import nanstd  # noqa: E402

from rlvr import AdvantageInputs, build  # noqa: E402

pytestmark = pytest.mark.peers
START = "unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)"
END = "advantages = torch.nan_to_num(advantages, nan=0.0)"


def trl_block(trainer_cls: type) -> str:
    """TRL's advantage statements, cut out of ``_generate_and_score_completions``."""
    lines = inspect.getsource(trainer_cls._generate_and_score_completions).splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == START)
    end = next(i for i, line in enumerate(lines) if line.strip() == END and i > start)
    return textwrap.dedent("\n".join(lines[start:end + 1]))


def run_trl(trainer_cls: type, rewards_per_func: torch.Tensor, num_generations: int,
            weights: list[float] | None = None, **attrs) -> torch.Tensor:
    """Execute TRL's block with a stand-in ``self``; returns TRL's (N,) advantages."""
    k = rewards_per_func.shape[1]
    reward_weights = torch.ones(k) if weights is None else torch.tensor(weights)
    fake_self = SimpleNamespace(reward_weights=reward_weights, reward_funcs=[None] * k, beta=0.0,
                                reward_clip_range=None, **attrs)
    scope = {"torch": torch, "nanstd": nanstd, "self": fake_self, "rewards_per_func": rewards_per_func,
             "num_generations": num_generations, "device": rewards_per_func.device}
    exec(trl_block(trainer_cls), scope)  # noqa: S102 - TRL's own installed source, not user input
    return scope["advantages"]


def contiguous_batch(seed: int, groups: int = 4, g: int = 4, k: int = 1):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 3, (groups * g, k), generator=gen).float() / 2  # ties and spread
    rewards[:g] = 1.0  # one zero-std group
    ids = torch.arange(groups).repeat_interleave(g)  # (N,) TRL's layout
    mask = torch.ones(groups * g, 3, dtype=torch.bool)
    mask[::3, 2] = False  # padding must not change sequence-level advantages
    return rewards, ids, mask


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_grpo_matches_trl_scale_rewards(seed, scale):
    rewards, ids, mask = contiguous_batch(seed, k=2)
    weights = [1.0, 0.5]
    ref = run_trl(GRPOTrainer, rewards, 4, weights, scale_rewards=scale,
                  multi_objective_aggregation="sum_then_normalize")
    # TRL: weighted sum of objectives first; ddof 1 (nanstd), eps 1e-4 on the std; 'batch' divides
    # by the std of the raw summed rewards.
    inputs = AdvantageInputs(rewards, mask, ids, reward_weights=torch.tensor(weights))
    ours = build("advantage", "grpo", scale=scale, ddof=1, eps=1e-4)(inputs)
    torch.testing.assert_close(ours.advantages, ref.unsqueeze(1) * mask, rtol=1e-5, atol=1e-5)


def test_grpo_matches_trl_on_shuffled_rows():
    rewards, ids, mask = contiguous_batch(3)
    ref = run_trl(GRPOTrainer, rewards, 4, scale_rewards="group", multi_objective_aggregation="sum_then_normalize")
    perm = torch.randperm(len(ids), generator=torch.Generator().manual_seed(0))
    ours = build("advantage", "grpo", ddof=1, eps=1e-4)(AdvantageInputs(rewards[perm], mask[perm], ids[perm]))
    torch.testing.assert_close(ours.advantages, (ref.unsqueeze(1) * mask)[perm], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_gdpo_sequences_matches_trl_normalize_then_sum(seed):
    rewards, ids, mask = contiguous_batch(seed, k=3)
    weights = [1.0, 0.5, 2.0]
    ref = run_trl(GRPOTrainer, rewards, 4, weights, scale_rewards="group",
                  multi_objective_aggregation="normalize_then_sum")
    # TRL normalize_then_sum: per-objective group z-score (ddof 1, eps 1e-4 on the std), weighted
    # sum, then (x − mean)/(std + 1e-4) over rows: gdpo with whiten='sequences'.
    gdpo = build("advantage", "gdpo", ddof=1, eps=1e-4, whiten="sequences", whiten_ddof=1, whiten_eps=1e-4)
    ours = gdpo(AdvantageInputs(rewards, mask, ids, reward_weights=torch.tensor(weights)))
    torch.testing.assert_close(ours.advantages, ref.unsqueeze(1) * mask, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rloo_matches_trl(seed):
    rewards, ids, mask = contiguous_batch(seed)
    ref = run_trl(RLOOTrainer, rewards, 4, normalize_advantages=False)
    ours = build("advantage", "rloo")(AdvantageInputs(rewards, mask, ids))
    torch.testing.assert_close(ours.advantages, ref.unsqueeze(1) * mask, rtol=1e-5, atol=1e-5)


def test_trl_block_is_the_advantage_step():
    # Guards the cut: the block must compute advantages from grouped rewards with TRL's 1e-4.
    block = trl_block(GRPOTrainer)
    assert "scale_rewards" in block and "1e-4" in block and "num_generations" in block
