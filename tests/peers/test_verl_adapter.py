"""rlvr plug-ins registered into verl 0.9.1 and called the way verl calls them.

Every function under test is fetched through verl's own ``get_adv_estimator_fn`` /
``get_policy_loss_fn`` and called with verl's keyword arguments, then compared with verl's built-in
function of the same method on the same inputs. The ``algorithm`` config is built as verl's trainer
passes it (a struct-mode OmegaConf DictConfig of ``AlgoConfig``'s fields); the actor config is verl's
``ActorConfig`` dataclass (as in test_verl_losses.py). Batch helpers come from the sibling peer tests.
Conventions already match verl by default (ddof 1, eps 1e-6 on the group std, whitening eps 1e-8
inside the root, singleton groups mean 0 / std 1), so no rlvr parameter is pinned here unless a test
is about parameters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
from omegaconf import OmegaConf  # noqa: E402  (verl dependency, only after the skip check)
from verl.trainer.config import AlgoConfig  # noqa: E402

from rlvr.integrations import verl as adapter  # noqa: E402
from rlvr.integrations.verl import group_ids_from_index, register_with_verl  # noqa: E402
from rlvr.registry import RegistryError, names  # noqa: E402
from tests.peers.test_verl_advantages import last_token_rewards, random_batch, verl_gdpo  # noqa: E402
from tests.peers.test_verl_losses import VERL_MODES, _actor_config, _batch  # noqa: E402
from tests.peers.verl_table import built_in, rlvr_names  # noqa: E402

pytestmark = pytest.mark.peers
SEEDS = [0, 1]


@pytest.fixture(scope="module", autouse=True)
def registered() -> list[str]:
    return register_with_verl()


@pytest.fixture
def fresh(monkeypatch):
    """verl's registries and the adapter cache without any rlvr adapter, restored afterwards."""
    for module, attr in [(core_algos, "ADV_ESTIMATOR_REGISTRY"), (core_algos, "POLICY_LOSS_REGISTRY"),
                         (adapter, "_ADAPTERS")]:
        table = getattr(module, attr)
        monkeypatch.setattr(module, attr, {k: v for k, v in table.items() if not isinstance(v, adapter._Adapter)})


def algo_config(**fields):
    """``algorithm`` as verl's trainer passes it: a struct-mode DictConfig (new keys need Hydra's '+')."""
    values = OmegaConf.to_container(OmegaConf.structured(AlgoConfig))
    values.update(fields)
    config = OmegaConf.create(values)
    OmegaConf.set_struct(config, True)
    return config


# --- registration ------------------------------------------------------------------------------

def test_registers_every_plugin_under_rlvr_prefix_and_twice_is_fine(registered):
    expected = [f"rlvr_{n}" for n in names("advantage")] + [f"rlvr_{n}" for n in names("loss")]
    assert registered == expected
    for n in names("advantage"):
        assert core_algos.get_adv_estimator_fn(f"rlvr_{n}").rlvr_name == n
    for n in names("loss"):
        assert core_algos.get_policy_loss_fn(f"rlvr_{n}").rlvr_name == n
    before = core_algos.get_adv_estimator_fn("rlvr_grpo")
    assert register_with_verl() == expected  # verl's register_adv_est raises on a *different* function
    assert core_algos.get_adv_estimator_fn("rlvr_grpo") is before


def test_names_mapping_registers_only_those(fresh):
    assert register_with_verl({"grpo": "my_grpo", "cispo": "my_cispo"}) == ["my_grpo", "my_cispo"]
    assert core_algos.get_adv_estimator_fn("my_grpo").rlvr_name == "grpo"
    assert core_algos.get_policy_loss_fn("my_cispo").rlvr_name == "cispo"
    with pytest.raises(ValueError):
        core_algos.get_adv_estimator_fn("rlvr_rloo")  # not asked for


def test_refuses_to_shadow_verl_functions(fresh):
    with pytest.raises(ValueError, match="already has a policy loss named 'vanilla'"):
        register_with_verl({"ppo_clip": "vanilla"})  # verl itself would replace it silently
    assert core_algos.get_policy_loss_fn("vanilla") is core_algos.compute_policy_loss_vanilla
    with pytest.raises(ValueError, match="already has an advantage estimator named 'grpo'"):
        register_with_verl({"grpo": "grpo"})
    assert core_algos.get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage


def test_bad_names_and_params_fail_at_registration(fresh):
    with pytest.raises(RegistryError, match="valid: .*grpo"):
        register_with_verl({"no_such_method": "x"})
    with pytest.raises(RegistryError, match="epz"):
        register_with_verl({"grpo": "g"}, params={"grpo": {"epz": 1e-4}})
    with pytest.raises(RegistryError, match="rloo"):
        register_with_verl({"grpo": "g"}, params={"rloo": {}})  # params for a plug-in not registered


def test_user_plugin_by_import_path(fresh):
    assert register_with_verl({"rlvr.losses.cispo:CISPO": "user_cispo"}) == ["user_cispo"]
    old, new, adv, mask = _batch(4)
    config = _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.2)
    ours = _run(core_algos.get_policy_loss_fn("user_cispo"), old, new, adv, mask, "token-mean", config)
    theirs = _run(core_algos.get_policy_loss_fn("cispo"), old, new, adv, mask, "token-mean", config)
    _assert_same(ours, theirs, ["actor/pg_clipfrac", "actor/ppo_kl"])


class _NoVerl:
    """A meta-path finder that answers as if verl were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "verl":
            raise ModuleNotFoundError("No module named 'verl'", name="verl")
        return None


def test_missing_verl_gives_a_clear_import_error(monkeypatch):
    for key in [k for k in sys.modules if k == "verl" or k.startswith("verl.")]:
        monkeypatch.delitem(sys.modules, key)  # restored after the test
    monkeypatch.setattr(sys, "meta_path", [_NoVerl(), *sys.meta_path])
    with pytest.raises(ImportError, match="package 'verl' is missing"):
        register_with_verl()


def test_importing_the_adapter_does_not_import_verl():
    code = "import sys, rlvr.integrations.verl; print('verl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


ROOT = Path(__file__).resolve().parents[2]
PROBE = ("import json, verl; from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as a, "
         "POLICY_LOSS_REGISTRY as l; print(json.dumps(sorted(n for n in [*a, *l] if n.startswith('rlvr_'))))")


def _verl_process(tmp_path, **env) -> list[str]:
    """The rlvr_ names registered after a bare ``import verl`` in a new process, with rlvr's
    ``verl.plugins`` entry points (read from pyproject.toml) installed as package metadata."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["verl.plugins"]
    info = tmp_path / "rlvr_entry_points-0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlvr-entry-points\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[verl.plugins]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items()))
    paths = [str(tmp_path), str(ROOT / "src"), str(ROOT)]
    full_env = {**os.environ, "PYTHONPATH": ":".join(paths), "OMP_NUM_THREADS": "1", **env}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=full_env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_verl_loads_the_entry_point_in_a_new_process(tmp_path):
    # verl 0.9.1's own discovery: verl/__init__.py loads the "verl.plugins" group on import.
    assert 'entry_points(group="verl.plugins")' in Path(core_algos.__file__).parents[2].joinpath(
        "__init__.py").read_text()
    expected = sorted(f"rlvr_{n}" for kind in ("advantage", "loss") for n in built_in(kind))
    assert _verl_process(tmp_path) == expected
    assert _verl_process(tmp_path, VERL_USE_EXTERNAL_PLUGINS="none") == []  # verl's switch: nothing loaded


def test_the_external_module_hook_registers_too(tmp_path):
    names_seen = _verl_process(tmp_path, VERL_USE_EXTERNAL_PLUGINS="none",
                               VERL_USE_EXTERNAL_MODULES="rlvr.integrations.verl_plugin")
    assert "rlvr_grpo" in names_seen and "rlvr_cispo" in names_seen


# --- what verl's trainer passes: refusals and kept state -----------------------------------------

def _trainer_keywords(seed: int = 0) -> dict:
    """Exactly the keywords verl 0.9.1's compute_advantage gives a registered estimator."""
    rewards, mask, _, uids = random_batch(seed, binary=True)
    return {"token_level_rewards": last_token_rewards(rewards[:, 0], mask), "response_mask": mask.float(),
            "config": algo_config(), "index": uids}


@pytest.mark.parametrize("name", rlvr_names("advantage", "refused"))
def test_estimators_verl_cannot_feed_are_refused_by_name(name):
    with pytest.raises(adapter.VerlUnsupportedError, match=f"rlvr_{name} \\(rlvr's {name}\\) "):
        _adv(f"rlvr_{name}", **_trainer_keywords())


@pytest.mark.parametrize("name", rlvr_names("loss", "refused"))
def test_losses_verl_cannot_feed_are_refused_by_name(name):
    old, new, adv, mask = _batch(0)
    with pytest.raises(adapter.VerlUnsupportedError, match=f"rlvr_{name} \\(rlvr's {name}\\) .*ppo_loss"):
        core_algos.get_policy_loss_fn(f"rlvr_{name}")(old_log_prob=old, log_prob=new, advantages=adv,
                                                        response_mask=mask.float(), config=_actor_config())


def test_fade_reads_log_probs_when_a_caller_passes_them():
    keywords = _trainer_keywords()
    logp = -torch.rand(keywords["response_mask"].shape, generator=torch.Generator().manual_seed(5)) - 0.1
    adv, _ = _adv("rlvr_fade", **keywords, old_log_probs=logp)
    mask = keywords["response_mask"].bool()
    assert torch.isfinite(adv).all() and adv[mask].abs().sum() > 0


def test_the_estimator_and_its_state_are_kept_from_call_to_call():
    """tether with an EMA weight (critic values passed, as a trainer of one's own may): the adapter's
    second call continues the first call's EMA, as one estimator called twice does."""
    config = algo_config(rlvr={"tether": {"ema": True, "ema_beta": 0.5}})
    batches = []
    for seed in (0, 1):
        keywords = _trainer_keywords(seed)
        keywords["values"] = torch.rand(keywords["response_mask"].shape, generator=torch.Generator().manual_seed(seed))
        batches.append({**keywords, "config": config})
    fn = core_algos.get_adv_estimator_fn("rlvr_tether")
    fn._plugin = None  # start from a fresh estimator
    ours = [fn(**b)[0] for b in batches]
    kept = fn._plugin
    assert kept is not None
    fn(**batches[1])
    assert fn._plugin is kept  # same hyperparameters: the same object
    fresh = adapter.VerlAdvantage("tether", {})
    one_call = fresh(**batches[1])[0]  # batch 1 alone: no EMA history
    again = adapter.VerlAdvantage("tether", {})
    two_calls = [again(**b)[0] for b in batches]
    torch.testing.assert_close(ours[1], two_calls[1])
    assert not torch.allclose(ours[1], one_call)  # the history changed the weight


def test_group_ids_from_index_is_stable_and_type_blind():
    uids = np.array(["b", "a", "b", "c", "a"], dtype=object)
    # first appearance order: b → 0, a → 1, c → 2
    assert group_ids_from_index(uids, 5).tolist() == [0, 1, 0, 2, 1]
    assert group_ids_from_index(torch.tensor([7, 3, 7, 9, 3]), 5).tolist() == [0, 1, 0, 2, 1]
    assert group_ids_from_index(None, 3).tolist() == [0, 1, 2]  # no uid: every row alone
    with pytest.raises(ValueError, match="4 entries for 5 rows"):
        group_ids_from_index(uids[:4], 5)


# --- advantages: rlvr_<name> vs verl's built-in --------------------------------------------------

def _adv(name: str, **kwargs):
    return core_algos.get_adv_estimator_fn(name)(**kwargs)


def _assert_pair(ours, theirs, mask=None):
    for mine, ref in zip(ours, theirs):
        if mask is not None:  # verl leaves the carried accumulator on untrained positions
            mine, ref = mine[mask], ref[mask]
        torch.testing.assert_close(mine, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_matches_verl(seed, norm):
    rewards, mask, _, uids = random_batch(seed, binary=seed == 1)  # uneven, shuffled groups, padding
    batch = {"token_level_rewards": last_token_rewards(rewards[:, 0], mask), "response_mask": mask.float(),
             "index": uids}
    theirs = _adv("grpo", **batch, norm_adv_by_std_in_grpo=norm)
    ours = _adv("rlvr_grpo", **batch, config=algo_config(adv_estimator="rlvr_grpo", norm_adv_by_std_in_grpo=norm))
    _assert_pair(ours, theirs)  # returns = advantages, as verl's grpo
    assert torch.equal(ours[0], ours[1])
    if not norm:  # dr_grpo is grpo without the std, whatever the verl flag says
        dr = _adv("rlvr_dr_grpo", **batch, config=algo_config())
        _assert_pair(dr, theirs)


@pytest.mark.parametrize("seed", SEEDS)
def test_rlvr_params_in_algorithm_config(seed):
    # +algorithm.rlvr.grpo.eps=0.5 on the command line ↔ verl's epsilon=0.5 keyword.
    rewards, mask, _, uids = random_batch(seed)
    batch = {"token_level_rewards": last_token_rewards(rewards[:, 0], mask), "response_mask": mask.float(),
             "index": uids}
    theirs = _adv("grpo", **batch, epsilon=0.5)
    ours = _adv("rlvr_grpo", **batch, config=algo_config(rlvr={"grpo": {"eps": 0.5}}))
    _assert_pair(ours, theirs)
    default = _adv("rlvr_grpo", **batch, config=algo_config())
    assert not torch.allclose(default[0], ours[0])  # the parameter took effect
    with pytest.raises(RegistryError, match="epz"):
        _adv("rlvr_grpo", **batch, config=algo_config(rlvr={"grpo": {"epz": 0.5}}))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("verl_name, rlvr_name", [("rloo", "rlvr_rloo"),
                                                  ("reinforce_plus_plus_baseline", "rlvr_reinforce_pp_baseline"),
                                                  ("gdpo", "rlvr_gdpo")])
def test_group_estimators_match_verl(seed, verl_name, rlvr_name):
    rewards, mask, _, uids = random_batch(seed)
    batch = {"token_level_rewards": last_token_rewards(rewards[:, 0], mask), "response_mask": mask.float(),
             "index": uids, "config": algo_config(adv_estimator=verl_name)}
    _assert_pair(_adv(rlvr_name, **batch), _adv(verl_name, **batch))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_pp_matches_verl(seed, gamma):
    _, mask, _, _ = random_batch(seed, holes=True)  # untrained spans inside rows
    token_rewards = torch.randn(mask.shape, generator=torch.Generator().manual_seed(seed))  # dense
    batch = {"token_level_rewards": token_rewards, "response_mask": mask.float(),
             "config": algo_config(gamma=gamma)}  # verl's reinforce_plus_plus reads config.gamma
    _assert_pair(_adv("rlvr_reinforce_pp", **batch), _adv("reinforce_plus_plus", **batch))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.99, 0.95)])
def test_gae_matches_verl_when_values_are_passed(seed, gamma, lam):
    rewards, mask, _, uids = random_batch(seed, holes=True)
    values = torch.randn(mask.shape, generator=torch.Generator().manual_seed(100 + seed))
    token_rewards = last_token_rewards(rewards[:, 0], mask)
    theirs = _adv("gae", token_level_rewards=token_rewards, values=values, response_mask=mask.float(),
                  gamma=gamma, lam=lam)
    ours = _adv("rlvr_gae", token_level_rewards=token_rewards, values=values, response_mask=mask.float(),
                index=uids, config=algo_config(gamma=gamma, lam=lam))  # gamma, lam read from the config
    _assert_pair(ours, theirs, mask=mask)
    with pytest.raises(adapter.VerlUnsupportedError, match="rlvr_gae .*needs values"):  # verl's trainer passes none
        _adv("rlvr_gae", token_level_rewards=token_rewards, response_mask=mask.float(), config=algo_config())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", [True, False])
def test_gdpo_multi_objective_matches_verl(seed, norm):
    rewards, mask, _, uids = random_batch(seed, k=3)
    weights = [1.0, 0.5, 2.0]
    theirs = verl_gdpo(rewards, mask, uids, weights, norm)
    config = algo_config(gdpo_reward_keys=["r0", "r1", "r2"], gdpo_reward_weights=weights,
                         norm_adv_by_std_in_grpo=norm)
    non_tensor = {f"r{j}": rewards[:, j].numpy() for j in range(3)}
    ours, _ = _adv("rlvr_gdpo", token_level_rewards=torch.zeros(mask.shape), response_mask=mask.float(),
                   index=uids, config=config, non_tensor_batch=non_tensor)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


# --- policy losses: rlvr_<name> vs verl's built-in ----------------------------------------------

def _run(fn, old, new, adv, mask, mode, config, weights=None):
    """(loss, d loss / d log_prob, metrics) of a verl policy-loss function called as verl calls it."""
    logp = new.clone().requires_grad_(True)
    loss, metrics = fn(old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask, loss_agg_mode=mode,
                       config=config, rollout_is_weights=weights)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad, metrics


def _assert_same(ours, theirs, metric_keys):
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-5, atol=1e-6)
    for key in metric_keys:
        assert ours[2][key] == pytest.approx(theirs[2][key], rel=1e-5, abs=1e-6), key


def _dual_clip_batch():
    old, new, adv, mask = _batch(1, spread=1.0)
    old[0, 1], new[0, 1], adv[0, 1] = -3.0, -0.5, -1.0  # ρ = e^2.5 > 3 with A < 0: the dual clip binds
    return old, new, adv, mask


@pytest.mark.parametrize("mode", VERL_MODES)
@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bool])  # legacy workers: float; new: bool
def test_ppo_clip_matches_vanilla(mode, mask_dtype):
    old, new, adv, mask = _dual_clip_batch()
    config = _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28)  # clip_ratio_c defaults to 3.0
    args = (old, new, adv, mask.to(mask_dtype), mode, config)
    theirs = _run(core_algos.get_policy_loss_fn("vanilla"), *args)
    ours = _run(core_algos.get_policy_loss_fn("rlvr_ppo_clip"), *args)
    assert theirs[2]["actor/pg_clipfrac"] > 0 and theirs[2]["actor/pg_clipfrac_lower"] > 0
    assert set(ours[2]) == set(theirs[2])
    _assert_same(ours, theirs, theirs[2])


@pytest.mark.parametrize("mode", VERL_MODES)
def test_rollout_is_weights_and_global_batch_info(mode):
    old, new, adv, mask = _dual_clip_batch()
    info = {"dp_size": 2, "batch_num_tokens": 40, "global_batch_size": 12, "loss_scale_factor": 9}
    config = _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28, global_batch_info=info)
    weights = torch.empty(old.shape).uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(3))
    args = (old, new, adv, mask.float(), mode, config, weights)
    theirs = _run(core_algos.get_policy_loss_fn("vanilla"), *args)
    ours = _run(core_algos.get_policy_loss_fn("rlvr_ppo_clip"), *args)
    _assert_same(ours, theirs, theirs[2])
    plain = _run(core_algos.get_policy_loss_fn("rlvr_ppo_clip"), old, new, adv, mask.float(), mode,
                 _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28), None)
    assert not torch.allclose(plain[0], ours[0])  # weights and global normalisers changed the loss


@pytest.mark.parametrize("eps", [(3e-4, 4e-4), (0.05, 0.08)])
@pytest.mark.parametrize("mode", VERL_MODES)
def test_gspo_matches_verl(eps, mode):
    old, _, adv, mask = _batch(2)
    new = old + 2e-2 * torch.randn(old.shape, generator=torch.Generator().manual_seed(7))
    config = _actor_config(clip_ratio_low=eps[0], clip_ratio_high=eps[1])
    theirs = _run(core_algos.get_policy_loss_fn("gspo"), old, new, adv, mask.float(), mode, config)
    ours = _run(core_algos.get_policy_loss_fn("rlvr_gspo"), old, new, adv, mask.float(), mode, config)
    assert (theirs[2]["actor/pg_clipfrac"] > 0) == (eps[0] < 1e-3)  # the narrow range clips, the wide one not
    _assert_same(ours, theirs, ["actor/pg_clipfrac", "actor/ppo_kl"])


@pytest.mark.parametrize("name", ["dppo_tv", "dppo_kl"])
@pytest.mark.parametrize("cap", [20.0, 3.0])  # clip_ratio_c: verl's fallback and ActorConfig's default
@pytest.mark.parametrize("mode", VERL_MODES)
def test_dppo_matches_verl(name, cap, mode):
    old, new, adv, mask = _batch(3, spread=1.0)
    config = _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=cap)
    theirs = _run(core_algos.get_policy_loss_fn(name), old, new, adv, mask.float(), mode, config)
    ours = _run(core_algos.get_policy_loss_fn(f"rlvr_{name}"), old, new, adv, mask.float(), mode, config)
    assert 0 < theirs[2]["actor/pg_clipfrac"] < 1
    assert set(ours[2]) == set(theirs[2])
    _assert_same(ours, theirs, theirs[2])


@pytest.mark.parametrize("eps", [(0.2, 0.2), (1.0, 4.0)])
@pytest.mark.parametrize("mode", VERL_MODES)
def test_cispo_matches_verl(eps, mode):
    old, new, adv, mask = _batch(4)
    config = _actor_config(clip_ratio_low=eps[0], clip_ratio_high=eps[1])
    theirs = _run(core_algos.get_policy_loss_fn("cispo"), old, new, adv, mask.float(), mode, config)
    ours = _run(core_algos.get_policy_loss_fn("rlvr_cispo"), old, new, adv, mask.float(), mode, config)
    _assert_same(ours, theirs, ["actor/pg_clipfrac", "actor/ppo_kl"])


# --- loss parameters: registration params and policy_loss.rlvr_params ---------------------------

def test_registration_params_override_actor_knobs(fresh):
    # Layer 3 beats layer 2: eps_high fixed at 0.28 although the actor says clip_ratio_high=0.2.
    register_with_verl({"ppo_clip": "ppo_clip_high"}, params={"ppo_clip": {"eps_high": 0.28}})
    old, new, adv, mask = _dual_clip_batch()
    actor_02 = _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.2)
    theirs = _run(core_algos.get_policy_loss_fn("vanilla"), old, new, adv, mask.float(), "token-mean",
                  _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28))
    ours = _run(core_algos.get_policy_loss_fn("ppo_clip_high"), old, new, adv, mask.float(), "token-mean", actor_02)
    _assert_same(ours, theirs, theirs[2])
    # Re-registering with other params updates the object verl already holds.
    fn = core_algos.get_policy_loss_fn("ppo_clip_high")
    register_with_verl({"ppo_clip": "ppo_clip_high"})
    assert core_algos.get_policy_loss_fn("ppo_clip_high") is fn and fn.params == {}
    at_02 = _run(fn, old, new, adv, mask.float(), "token-mean", actor_02)
    assert not torch.allclose(at_02[1], ours[1])


def test_dppo_ratio_surrogate_via_registration_has_verl_gradient(fresh):
    # surrogate='ratio' (−A·ρ·valid) has the value of neither verl form but the same gradient while ρ ≤ C.
    register_with_verl({"dppo_tv": "dppo_tv_ratio"}, params={"dppo_tv": {"surrogate": "ratio"}})
    old, new, adv, mask = _batch(3, spread=1.0)
    config = _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=1e6)  # truncation off
    theirs = _run(core_algos.get_policy_loss_fn("dppo_tv"), old, new, adv, mask.float(), "token-mean", config)
    ours = _run(core_algos.get_policy_loss_fn("dppo_tv_ratio"), old, new, adv, mask.float(), "token-mean", config)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(ours[0], theirs[0])


def test_policy_loss_rlvr_params_in_a_dictconfig_actor():
    # Where the actor config is a DictConfig, policy_loss.rlvr_params is honoured (layer 4).
    old, new, adv, mask = _dual_clip_batch()
    actor = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28,
                              "clip_ratio_c": 3.0, "global_batch_info": {},
                              "policy_loss": {"loss_mode": "rlvr_ppo_clip", "rlvr_params": {"clip_ratio_c": None}}})
    ours = _run(core_algos.get_policy_loss_fn("rlvr_ppo_clip"), old, new, adv, mask.float(), "token-mean", actor)
    no_dual = _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=1e9)  # dual clip off
    theirs = _run(core_algos.get_policy_loss_fn("vanilla"), old, new, adv, mask.float(), "token-mean", no_dual)
    _assert_same(ours, theirs, ["actor/pg_clipfrac", "actor/ppo_kl"])
    dual = _run(core_algos.get_policy_loss_fn("vanilla"), old, new, adv, mask.float(), "token-mean",
                _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28))
    assert not torch.allclose(dual[1], ours[1])  # the dual clip would have changed the gradient
