"""rlvr's advantage estimators against verl 0.9.1 ``verl.trainer.ppo.core_algos``.

Random batches with uneven groups (sizes 1..5, singletons included), non-contiguous group ids
(rows shuffled, verl gets them as a numpy array of uid strings) and padding masks. Conventions
pinned to verl's: unbiased group std (ddof=1) with eps 1e-6 added to the std; a singleton group
uses mean 0, std 1; whitening is unbiased with eps 1e-8 inside the square root, over trained tokens.
verl leaves non-zero values on untrained positions for GAE (the carried accumulator); rlvr writes 0
there, so GAE is compared on trained tokens and rlvr's zeros are checked separately.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")

from rlvr import AdvantageInputs, build  # noqa: E402

pytestmark = pytest.mark.peers
SEEDS = [0, 1, 2]


def random_batch(seed: int, t: int = 7, k: int = 1, binary: bool = False, holes: bool = False):
    """Uneven, shuffled groups; right padding (and, with ``holes``, untrained spans inside rows)."""
    g = torch.Generator().manual_seed(seed)
    sizes = [1, 2, 3, 5, 4, 1]
    ids = torch.cat([torch.full((s,), 10 * i + 3) for i, s in enumerate(sizes)])  # (N,) sparse ids
    ids = ids[torch.randperm(len(ids), generator=g)]  # groups interleaved
    n = len(ids)
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)  # (N, T)
    if holes:  # an observation span (untrained) inside some rows, like multi-turn tool output
        mask &= ~((torch.rand(n, t, generator=g) < 0.25) & (torch.arange(t) > 0))
        mask[:, 0] = True
    if binary:
        rewards = torch.randint(0, 2, (n, k), generator=g).float()
    else:
        rewards = torch.randn(n, k, generator=g)
    uids = np.array([f"uid-{int(i)}" for i in ids], dtype=object)
    return rewards, mask, ids, uids


def last_token_rewards(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's token_level_rewards: the outcome score on the last trained token."""
    out = torch.zeros(mask.shape)
    last = (mask * torch.arange(mask.shape[1])).argmax(dim=1)
    out[torch.arange(len(scores)), last] = scores
    return out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_and_dr_grpo_match_verl(seed, binary, norm):
    rewards, mask, ids, uids = random_batch(seed, binary=binary)
    ref, _ = core_algos.compute_grpo_outcome_advantage(
        last_token_rewards(rewards[:, 0], mask), mask.float(), uids, epsilon=1e-6, norm_adv_by_std_in_grpo=norm)
    name = "grpo" if norm else "dr_grpo"  # dr_grpo = verl's norm_adv_by_std_in_grpo=False
    ours = build("advantage", name, ddof=1, eps=1e-6)(AdvantageInputs(rewards, mask, ids)).advantages
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("binary", [False, True])
def test_rloo_matches_verl(seed, binary):
    rewards, mask, ids, uids = random_batch(seed, binary=binary)
    ref, _ = core_algos.compute_rloo_outcome_advantage(last_token_rewards(rewards[:, 0], mask), mask.float(), uids)
    ours = build("advantage", "rloo")(AdvantageInputs(rewards, mask, ids)).advantages  # singleton='raw' = verl
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [1.0, 0.9])
@pytest.mark.parametrize("dense", [False, True])
def test_reinforce_pp_matches_verl(seed, gamma, dense):
    rewards, mask, ids, _ = random_batch(seed, holes=dense)
    token_rewards = torch.randn(mask.shape, generator=torch.Generator().manual_seed(seed)) if dense \
        else last_token_rewards(rewards[:, 0], mask)
    ref_adv, ref_ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(
        token_rewards, mask.float(), config=SimpleNamespace(gamma=gamma))
    inputs = AdvantageInputs(rewards, mask, ids, token_rewards=token_rewards if dense else None)
    out = build("advantage", "reinforce_pp", gamma=gamma)(inputs)
    torch.testing.assert_close(out.advantages, ref_adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.returns, ref_ret, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_reinforce_pp_baseline_matches_verl(seed):
    rewards, mask, ids, uids = random_batch(seed)
    ref, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(
        last_token_rewards(rewards[:, 0], mask), mask.float(), uids)
    ours = build("advantage", "reinforce_pp_baseline")(AdvantageInputs(rewards, mask, ids)).advantages
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)])
@pytest.mark.parametrize("dense", [False, True])
def test_gae_matches_verl(seed, gamma, lam, dense):
    rewards, mask, ids, _ = random_batch(seed, holes=dense)
    g = torch.Generator().manual_seed(100 + seed)
    values = torch.randn(mask.shape, generator=g)
    token_rewards = torch.randn(mask.shape, generator=g) if dense else last_token_rewards(rewards[:, 0], mask)
    ref_adv, ref_ret = core_algos.compute_gae_advantage_return(token_rewards, values, mask.float(), gamma, lam)
    inputs = AdvantageInputs(rewards, mask, ids, values=values, token_rewards=token_rewards if dense else None)
    out = build("advantage", "gae", gamma=gamma, lam=lam)(inputs)  # whiten=True, ddof 1, eps 1e-8 = verl
    torch.testing.assert_close(out.advantages[mask], ref_adv[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.returns[mask], ref_ret[mask], rtol=1e-5, atol=1e-5)
    assert (out.advantages[~mask] == 0).all() and (out.returns[~mask] == 0).all()


def verl_gdpo(rewards: torch.Tensor, mask: torch.Tensor, uids, weights, norm: bool) -> torch.Tensor:
    """verl's multi-key GDPO path: per-key scores from non_tensor_batch, placed on the last response
    token found from batch['attention_mask'] (our masks are right-padded, so that is the last trained token)."""
    n, k = rewards.shape
    prompts = torch.ones(n, 2, dtype=torch.long)
    attention = torch.cat([torch.ones(n, 2, dtype=torch.long), mask.long()], dim=1)
    keys = [f"r{j}" for j in range(k)]
    config = {"gdpo_reward_keys": keys, "gdpo_reward_weights": weights}  # verl reads it with .get
    non_tensor = {key: rewards[:, j].numpy() for j, key in enumerate(keys)}
    adv, _ = core_algos.compute_gdpo_outcome_advantage(
        torch.zeros(mask.shape), mask.float(), uids, epsilon=1e-6, norm_adv_by_std_in_grpo=norm,
        config=config, non_tensor_batch=non_tensor, batch={"prompts": prompts, "attention_mask": attention})
    return adv


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", [True, False])
def test_gdpo_multi_objective_matches_verl(seed, norm):
    rewards, mask, ids, uids = random_batch(seed, k=3, binary=seed == 1)
    weights = [1.0, 0.5, 2.0]
    ref = verl_gdpo(rewards, mask, uids, weights, norm)
    inputs = AdvantageInputs(rewards, mask, ids, reward_weights=torch.tensor(weights))
    ours = build("advantage", "gdpo", norm_by_std=norm)(inputs).advantages  # eps 1e-6, ddof 1, whiten 'tokens'
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_gdpo_single_objective_matches_verl_fallback(seed):
    # Without reward keys verl normalises token_level_rewards alone, with weight 1.
    rewards, mask, ids, uids = random_batch(seed)
    ref, _ = core_algos.compute_gdpo_outcome_advantage(last_token_rewards(rewards[:, 0], mask), mask.float(), uids)
    ours = build("advantage", "gdpo")(AdvantageInputs(rewards, mask, ids)).advantages
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
