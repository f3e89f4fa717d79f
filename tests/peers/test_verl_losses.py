"""Peer equivalence: rlvr losses, aggregation and KL estimators vs verl 0.9.1 ``core_algos``.

verl's policy-loss functions read an ``ActorConfig`` (clip_ratio, clip_ratio_low/high,
clip_ratio_c via ``config.get``, and ``global_batch_info`` forwarded to ``agg_loss``); GSPO and
CISPO assert ``isinstance(config, ActorConfig)``, so we build verl's own ActorConfig with the few
required fields. Compared: the loss value, its gradient w.r.t. log_prob, and the diagnostics.

Parameter mapping (rlvr ← verl):
  * ppo_clip eps_low/eps_high ← clip_ratio_low/high; clip_ratio_c ← clip_ratio_c (verl always applies
    the dual clip, default 3.0; rlvr's ``None`` corresponds to a huge c);
  * dppo delta_low/high ← clip_ratio_low/high; dppo clip_ratio_c ← clip_ratio_c (verl's ActorConfig
    default 3.0 shadows the function's fallback 20, so both values are tested);
  * gspo / cispo eps_low/high ← clip_ratio_low/high;
  * aggregation num_tokens / num_seqs / norm ← batch_num_tokens / global_batch_size / loss_scale_factor.
"""

from __future__ import annotations

import pytest
import torch

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
from verl.workers.config import ActorConfig  # noqa: E402  (only after the skip check)

from rlvr.aggregation import aggregate  # noqa: E402
from rlvr.ops import kl_estimate  # noqa: E402
from rlvr.registry import build  # noqa: E402
from rlvr.types import LossInputs  # noqa: E402

pytestmark = pytest.mark.peers

N, T = 6, 7
VERL_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def _batch(seed: int, spread: float = 0.6):
    """Random old/new log-probs of valid probabilities, advantages and a right-padding mask."""
    g = torch.Generator().manual_seed(seed)
    old = torch.empty(N, T).uniform_(0.02, 0.98, generator=g).log()
    new = (old + spread * torch.randn(N, T, generator=g)).clamp(max=-1e-3)
    adv = torch.randn(N, T, generator=g)
    lengths = torch.tensor([7, 5, 1, 3, 0, 6])  # includes a fully padded row
    mask = torch.arange(T) < lengths.unsqueeze(-1)
    return old, new, adv, mask


def _actor_config(**kwargs) -> ActorConfig:
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, **kwargs)


def _verl(fn, old, new, adv, mask, mode, config):
    logp = new.clone().requires_grad_(True)
    loss, metrics = fn(old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask.float(),
                       loss_agg_mode=mode, config=config)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad, metrics


def _rlvr(name, params, old, new, adv, mask, mode, **normalisers):
    logp = new.clone().requires_grad_(True)
    out = build("loss", name, **params)(LossInputs(logprobs=logp, old_logprobs=old, advantages=adv, mask=mask))
    loss = aggregate(out.per_token, mask, mode, **normalisers)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad, out.metrics


def _assert_same(ours, theirs, metric_map):
    assert torch.allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-6), (ours[0], theirs[0])
    assert torch.allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-6)
    for mine, verl_key in metric_map.items():
        assert ours[2][mine].item() == pytest.approx(theirs[2][verl_key], rel=1e-5, abs=1e-6), mine


# --- aggregation ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", VERL_MODES)
def test_agg_loss_local(mode):
    old, _, _, mask = _batch(0)
    loss_mat = torch.randn(N, T, generator=torch.Generator().manual_seed(5))
    theirs = core_algos.agg_loss(loss_mat, mask.float(), mode)
    assert torch.allclose(aggregate(loss_mat, mask, mode), theirs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", VERL_MODES)
def test_agg_loss_global_normalisers_and_dp_size(mode):
    _, _, _, mask = _batch(0)
    loss_mat = torch.randn(N, T, generator=torch.Generator().manual_seed(6))
    rows = slice(0, 3)  # one shard of a 2-rank global batch
    theirs = core_algos.agg_loss(loss_mat[rows], mask[rows].float(), mode, dp_size=2,
                                 batch_num_tokens=int(mask.sum()), global_batch_size=N, loss_scale_factor=5)
    ours = aggregate(loss_mat[rows], mask[rows], mode, num_tokens=mask.sum(), num_seqs=N, norm=5.0, dp_size=2)
    assert torch.allclose(ours, theirs, rtol=1e-6, atol=1e-7)


# --- policy losses ----------------------------------------------------------------------------

CLIP_CASES = [  # (rlvr params, verl config kwargs)
    ({"eps_low": 0.2, "eps_high": 0.2, "clip_ratio_c": 3.0}, {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2}),
    ({"eps_low": 0.2, "eps_high": 0.28, "clip_ratio_c": 3.0}, {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28}),
    ({"eps_low": 0.2, "eps_high": 0.28, "clip_ratio_c": None},
     {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 1e9}),  # dual clip effectively off
]


@pytest.mark.parametrize("params, verl_kwargs", CLIP_CASES)
@pytest.mark.parametrize("mode", VERL_MODES)
def test_vanilla_ppo(params, verl_kwargs, mode):
    old, new, adv, mask = _batch(1, spread=1.0)
    old[0, 1], new[0, 1], adv[0, 1] = -3.0, -0.5, -1.0  # ρ = e^2.5 > 3 with A < 0: the dual clip binds
    theirs = _verl(core_algos.compute_policy_loss_vanilla, old, new, adv, mask, mode, _actor_config(**verl_kwargs))
    ours = _rlvr("ppo_clip", params, old, new, adv, mask, mode)
    metric_map = {"clipfrac": "actor/pg_clipfrac", "approx_kl": "actor/ppo_kl"}
    if params["clip_ratio_c"] is not None:
        metric_map["clipfrac_lower"] = "actor/pg_clipfrac_lower"
        assert theirs[2]["actor/pg_clipfrac_lower"] > 0  # the toy exercises the dual clip
    assert theirs[2]["actor/pg_clipfrac"] > 0
    _assert_same(ours, theirs, metric_map)


@pytest.mark.parametrize("eps", [(3e-4, 4e-4), (0.05, 0.08)])
@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "token-mean"])
def test_gspo(eps, mode):
    old, _, adv, mask = _batch(2)
    new = old + 2e-2 * torch.randn(N, T, generator=torch.Generator().manual_seed(7))
    config = _actor_config(clip_ratio_low=eps[0], clip_ratio_high=eps[1])
    theirs = _verl(core_algos.compute_policy_loss_gspo, old, new, adv, mask, mode, config)
    ours = _rlvr("gspo", {"eps_low": eps[0], "eps_high": eps[1]}, old, new, adv, mask, mode)
    _assert_same(ours, theirs, {"clipfrac": "actor/pg_clipfrac", "approx_kl": "actor/ppo_kl"})


@pytest.mark.parametrize("name, fn", [("dppo_tv", core_algos.compute_policy_loss_dppo_tv),
                                      ("dppo_kl", core_algos.compute_policy_loss_dppo_kl)])
@pytest.mark.parametrize("cap", [20.0, 3.0])
@pytest.mark.parametrize("mode", ["seq-mean-token-sum", "token-mean"])
def test_dppo(name, fn, cap, mode):
    old, new, adv, mask = _batch(3, spread=1.0)
    config = _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=cap)
    theirs = _verl(fn, old, new, adv, mask, mode, config)
    ours = _rlvr(name, {"delta_low": 0.2, "delta_high": 0.2, "clip_ratio_c": cap}, old, new, adv, mask, mode)
    assert 0 < theirs[2]["actor/pg_clipfrac"] < 1  # some tokens dropped, some kept
    _assert_same(ours, theirs, {"clipfrac": "actor/pg_clipfrac", "approx_kl": "actor/ppo_kl",
                                "clipfrac_lower": "actor/pg_clipfrac_lower"})


@pytest.mark.parametrize("eps", [(0.2, 0.2), (1.0, 4.0)])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_cispo(eps, mode):
    old, new, adv, mask = _batch(4)
    config = _actor_config(clip_ratio_low=eps[0], clip_ratio_high=eps[1])
    theirs = _verl(core_algos.compute_policy_loss_cispo, old, new, adv, mask, mode, config)
    ours = _rlvr("cispo", {"eps_low": eps[0], "eps_high": eps[1]}, old, new, adv, mask, mode)
    _assert_same(ours, theirs, {"clipfrac": "actor/pg_clipfrac", "approx_kl": "actor/ppo_kl"})


def test_global_batch_info_is_honoured():
    # verl forwards config.global_batch_info to agg_loss; rlvr takes the same normalisers.
    old, new, adv, mask = _batch(5)
    info = {"dp_size": 2, "batch_num_tokens": 40, "global_batch_size": 12, "loss_scale_factor": 9}
    config = _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28, global_batch_info=info)
    for mode in VERL_MODES:
        theirs = _verl(core_algos.compute_policy_loss_vanilla, old, new, adv, mask, mode, config)
        ours = _rlvr("ppo_clip", {"eps_high": 0.28, "clip_ratio_c": 3.0}, old, new, adv, mask, mode,
                     num_tokens=40, num_seqs=12, norm=9.0, dp_size=2)
        _assert_same(ours, theirs, {})


# --- KL estimators ----------------------------------------------------------------------------

@pytest.mark.parametrize("verl_name, kind, straight_through", [
    ("k1", "k1", False), ("k2", "k2", False), ("k3", "k3", False), ("low_var_kl", "k3", False),
    ("abs", "abs", False), ("k3+", "k3", True), ("k1+", "k1", True), ("abs+", "abs", True),
])
def test_kl_penalty(verl_name, kind, straight_through):
    old, new, _, _ = _batch(6, spread=3.0)  # wide: k3 hits its ±10 clamp somewhere
    results = []
    for impl in ("verl", "rlvr"):
        logp = new.clone().requires_grad_(True)
        if impl == "verl":
            value = core_algos.kl_penalty(logp, old, verl_name)
        else:
            value = kl_estimate(logp, old, kind, straight_through=straight_through)
        weights = torch.linspace(0.1, 1.0, N * T).view(N, T)  # a non-uniform upstream gradient
        (grad,) = torch.autograd.grad((value * weights).sum(), logp)
        results.append((value.detach(), grad))
    assert torch.allclose(results[1][0], results[0][0], rtol=1e-6, atol=1e-6)
    assert torch.allclose(results[1][1], results[0][1], rtol=1e-6, atol=1e-6)
    if kind == "k3":
        assert (results[0][0] == 10).any()  # the clamp was exercised
