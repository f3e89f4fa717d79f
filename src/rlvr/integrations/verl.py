"""rlvr inside verl: select rlvr's advantage estimators and policy losses by name in a verl run.

And any rlvr verifier as verl's reward function: :func:`compute_score` (see its docstring).

Registration: rlvr's ``pyproject.toml`` declares a ``verl.plugins`` entry point, which verl 0.9.1
loads on ``import verl`` in every process (the trainer's, where advantages are computed, and every
actor worker, where policy losses are): :mod:`rlvr.integrations.verl_plugin` calls
``register_with_verl()``, which registers every rlvr estimator and every rlvr loss as
``rlvr_<name>``. Where rlvr is not installed as a package, ``VERL_USE_EXTERNAL_MODULES=
rlvr.integrations.verl_plugin`` does the same. Then, in the verl config::

    algorithm.adv_estimator=rlvr_grpo
    actor_rollout_ref.actor.policy_loss.loss_mode=rlvr_ppo_clip

Each verl name holds one plug-in, built on its first call and kept (rebuilt only when its merged
hyperparameters change), so a stateful plug-in carries its state from call to call in a process.
A plug-in whose mechanism needs inputs the call lacks (``mechanism_inputs``, ``min_objectives``)
is refused with :class:`VerlUnsupportedError` naming it; docs/scaling.md has the table of which
names run inside verl's trainer.

Hyperparameters, lowest precedence first (a later layer overrides an earlier one):

1. the rlvr plug-in's ``Config`` defaults;
2. verl's own knobs, mapped where the plug-in's ``Config`` has the field —
   advantages: ``algorithm.gamma → gamma``, ``algorithm.lam → lam``,
   ``algorithm.norm_adv_by_std_in_grpo=False → scale='none'`` / ``norm_by_std=False``, and the
   ``epsilon`` keyword (when a caller passes it) ``→ eps``;
   losses: ``actor.clip_ratio_low/high`` (falling back to ``clip_ratio``) ``→ eps_low/eps_high``
   and ``delta_low/delta_high`` (DPPO), ``actor.clip_ratio_c → clip_ratio_c``;
3. ``params`` given to ``register_with_verl`` (``{"ppo_clip": {"log_ratio_clamp": None}}``);
4. run-time rlvr parameters in the verl config —
   advantages: the mapping ``algorithm.rlvr.<rlvr name>``, e.g. ``+algorithm.rlvr.grpo.eps=1e-4``
   (verl passes ``algorithm`` as an OmegaConf DictConfig, which takes new keys with ``+``);
   losses: the mapping ``actor.policy_loss.rlvr_params``. verl 0.9.1 builds the actor config as the
   dataclass ``ActorConfig`` / ``PolicyLossConfig``, which rejects unknown keys, so this layer is
   only reachable where the config is a DictConfig or a mapping; with verl's dataclasses use layer 3.

Unknown parameter names are errors naming the valid ones (``rlvr.registry.make_config``).

What verl passes: its trainer gives a registered (non built-in) estimator ``token_level_rewards``,
``response_mask``, ``config`` (the ``algorithm`` section) and ``index`` (the ``uid`` of each row);
``values`` go only to verl's own ``gae``, log-probs only to its optimal-baseline estimators and
per-objective scores only to its own ``gdpo``. So ``rlvr_gae`` (and the other critic-based
estimators) run for callers that pass ``values=``, ``rlvr_fade`` for callers that pass
``old_log_probs=`` or ``entropy=``, and are refused in a stock verl trainer; ``rlvr_gdpo`` sees
several objectives only when ``non_tensor_batch`` and ``config.gdpo_reward_keys`` are passed, is
refused when the keys are set without the batch, and otherwise normalises the single
``token_level_rewards``, as verl's ``gdpo`` does in that case. The policy loss is aggregated with
verl's own ``agg_loss``, so ``loss_agg_mode`` and ``config.global_batch_info`` (dp_size,
batch_num_tokens, global_batch_size, loss_scale_factor) keep verl's meaning unchanged.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor

from rlvr import registry
from rlvr.advantages.base import AdvantageEstimator
from rlvr.losses.base import PolicyLoss
from rlvr.types import AdvantageInputs, LossInputs

PREFIX = "rlvr_"
KINDS = ("advantage", "loss")
# rlvr loss metric → verl's name for the same diagnostic (others keep their rlvr name).
VERL_METRIC_NAMES = {"clipfrac": "pg_clipfrac", "approx_kl": "ppo_kl", "clipfrac_lower": "pg_clipfrac_lower"}


def _core_algos() -> ModuleType:
    """verl's ``core_algos`` module, imported only when the adapter is used."""
    try:
        return importlib.import_module("verl.trainer.ppo.core_algos")
    except ImportError as err:
        missing = getattr(err, "name", None) or "verl"
        raise ImportError(f"rlvr.integrations.verl needs the 'verl' package and its dependencies; "
                          f"importing verl.trainer.ppo.core_algos failed because package '{missing}' "
                          f"is missing ({err}). Install it, e.g. `pip install verl`.") from err


# --- reading verl configs (dataclass BaseConfig, OmegaConf DictConfig, dict or plain object) ---

def _get(config: Any, key: str) -> Any:
    """``config[key]`` for mappings, ``config.key`` otherwise; None when absent."""
    if config is None:
        return None
    if isinstance(config, Mapping):
        return config.get(key)
    return getattr(config, key, None)


def _plain(value: Any, where: str) -> dict[str, Any]:
    """A mapping (OmegaConf containers resolved) as a plain dict; None as {}."""
    if value is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # omegaconf comes with verl; without it only plain mappings occur
        DictConfig = ()  # type: ignore[assignment,misc]
    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True)  # type: ignore[return-value]
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{where} must be a mapping of rlvr parameters, got {type(value).__name__}")


def _fields(config_cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(config_cls)}


def _algo_knobs(config: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """verl's algorithm knobs under rlvr field names (keywords win over the config)."""
    def knob(name: str) -> Any:
        return kwargs[name] if name in kwargs else _get(config, name)

    knobs = {"gamma": knob("gamma"), "lam": knob("lam"), "eps": kwargs.get("epsilon")}
    norm = knob("norm_adv_by_std_in_grpo")
    if norm is not None:
        knobs["norm_by_std"] = bool(norm)
        if not norm:  # only switch the std off: True leaves each estimator's own default (dr_grpo: none)
            knobs["scale"] = "none"
    return knobs


def _actor_knobs(config: Any) -> dict[str, Any]:
    """verl's actor clip knobs under rlvr field names (clip_ratio_low/high fall back to clip_ratio)."""
    base = _get(config, "clip_ratio")
    low, high = _get(config, "clip_ratio_low"), _get(config, "clip_ratio_high")
    low, high = base if low is None else low, base if high is None else high
    return {"eps_low": low, "eps_high": high, "delta_low": low, "delta_high": high,
            "clip_ratio_c": _get(config, "clip_ratio_c")}


class VerlUnsupportedError(RuntimeError):
    """An rlvr method asked to run in verl without the inputs its mechanism needs."""


# What verl 0.9.1 hands a registered (non built-in) function, for the refusals' messages.
VERL_PASSES = {
    "advantage": "verl 0.9.1's trainer (ray_trainer.compute_advantage) passes a registered estimator only "
                 "token_level_rewards, response_mask, config and index (uid); values, log-probs and "
                 "per-objective scores go only to its own gae, optimal-baseline and gdpo",
    "loss": "verl 0.9.1's actor (workers/utils/losses.ppo_loss) passes a registered policy loss only "
            "old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config and rollout_is_weights",
}


class _Adapter:
    """A verl-callable wrapper of one rlvr plug-in; re-registration updates it in place.

    The plug-in is built once and kept (one per verl name), so a stateful one carries its state from
    call to call; it is rebuilt only when its merged hyperparameters change.
    """

    kind = ""

    def __init__(self, rlvr_name: str, params: Mapping[str, Any], verl_name: str = "") -> None:
        self.rlvr_name, self.params, self.verl_name = rlvr_name, dict(params), verl_name or PREFIX + rlvr_name
        self._plugin: Any = None
        self._plugin_key: str | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.rlvr_name!r}, params={self.params})"

    def build(self, knobs: dict[str, Any], runtime: dict[str, Any]) -> Any:
        """The plug-in with layers 1–4 of the module doc (verl knobs only where the field exists):
        the one already built when the merged hyperparameters are unchanged, else a new one."""
        config_cls = registry.get(self.kind, self.rlvr_name).Config
        valid = _fields(config_cls)
        merged = {k: v for k, v in knobs.items() if k in valid and v is not None}
        merged.update(self.params)
        merged.update(runtime)
        key = f"{self.rlvr_name}:{sorted(merged.items())!r}"
        if self._plugin is None or key != self._plugin_key:
            self._plugin = registry.build(self.kind, self.rlvr_name, **merged)
            self._plugin_key = key
        return self._plugin

    def refuse_missing(self, inputs: Any) -> None:
        """Refuse, naming the method, when ``inputs`` lacks what its mechanism needs
        (``mechanism_inputs``, and ``min_objectives`` for estimators)."""
        cls = registry.get(self.kind, self.rlvr_name)
        for options in cls.mechanism_inputs:
            if all(getattr(inputs, name) is None for name in options):
                raise VerlUnsupportedError(
                    f"{self.verl_name} (rlvr's {self.rlvr_name}) cannot run here: its mechanism needs "
                    f"{' or '.join(options)}, which this call did not pass; {VERL_PASSES[self.kind]}. "
                    f"docs/scaling.md lists the rlvr methods that run inside verl.")
        wanted = getattr(cls, "min_objectives", 1)
        if self.kind == "advantage" and inputs.rewards.shape[1] < wanted:
            raise VerlUnsupportedError(
                f"{self.verl_name} (rlvr's {self.rlvr_name}) needs at least {wanted} reward objectives, got "
                f"{inputs.rewards.shape[1]} (with one it is another estimator); {VERL_PASSES[self.kind]}.")


class VerlAdvantage(_Adapter):
    """A verl advantage-estimator function backed by an rlvr ``AdvantageEstimator``.

    Called as verl calls estimators (keywords): ``token_level_rewards (bs, T)``, ``response_mask
    (bs, T)``, ``index`` (bs,) uids (any hashable; None = every row its own group), ``config`` (the
    ``algorithm`` section, may be None); from a caller that has them, ``values (bs, T)``,
    ``old_log_probs (bs, T)`` (the sampling policy's log-probs, as verl names them) and ``entropy
    (bs, T)``; other keywords ignored except ``gamma``, ``lam``, ``epsilon``,
    ``norm_adv_by_std_in_grpo`` and ``non_tensor_batch``. A method whose mechanism needs an input the
    call lacks is refused (:class:`VerlUnsupportedError`). Returns ``(advantages, returns)``, both
    (bs, T); returns = advantages when the estimator has none.
    """

    kind = "advantage"

    def __call__(self, token_level_rewards: Tensor, response_mask: Tensor, index: Any = None,
                 config: Any = None, values: Tensor | None = None, old_log_probs: Tensor | None = None,
                 entropy: Tensor | None = None, **kwargs: Any) -> tuple[Tensor, Tensor]:
        runtime = _plain(_get(_get(config, "rlvr"), self.rlvr_name), f"algorithm.rlvr.{self.rlvr_name}")
        inputs = advantage_inputs(token_level_rewards, response_mask, index, values=values, config=config,
                                  non_tensor_batch=kwargs.get("non_tensor_batch"), logprobs=old_log_probs,
                                  entropy=entropy)
        self.refuse_missing(inputs)
        estimator = self.build(_algo_knobs(config, kwargs), runtime)
        with torch.no_grad():
            out = estimator(inputs)
        returns = out.advantages if out.returns is None else out.returns
        return out.advantages, returns


def advantage_inputs(token_level_rewards: Tensor, response_mask: Tensor, index: Any, *,
                     values: Tensor | None = None, config: Any = None,
                     non_tensor_batch: Mapping[str, Any] | None = None, logprobs: Tensor | None = None,
                     entropy: Tensor | None = None) -> AdvantageInputs:
    """rlvr's ``AdvantageInputs`` from verl's batch fields.

    rewards (N, 1) = Σ_t token_level_rewards (verl's outcome score), or (N, K) per-objective scores
    from ``non_tensor_batch[key]`` for ``key in config.gdpo_reward_keys`` (weights from
    ``config.gdpo_reward_weights``); token_rewards = token_level_rewards; mask = response_mask > 0;
    group_ids = ``index`` mapped to int64 in order of first appearance; values, logprobs and entropy
    as given (float32).
    """
    mask = response_mask.bool()  # (N, T)
    n = mask.shape[0]
    rewards = token_level_rewards.sum(-1, keepdim=True).float()  # (N, 1)
    weights = None
    keys = _get(config, "gdpo_reward_keys")
    if keys and non_tensor_batch is None:
        raise VerlUnsupportedError(f"gdpo_reward_keys {list(keys)} is set but no non_tensor_batch was passed: "
                                   f"{VERL_PASSES['advantage']}")
    if keys:
        missing = [k for k in keys if k not in non_tensor_batch]
        if missing:
            raise KeyError(f"gdpo_reward_keys {missing} not in non_tensor_batch (has {sorted(non_tensor_batch)})")
        columns = [torch.as_tensor(np.asarray(non_tensor_batch[k], dtype=np.float32)) for k in keys]
        rewards = torch.stack(columns, dim=1).to(mask.device)  # (N, K)
        given = _get(config, "gdpo_reward_weights")
        weights = None if given is None else torch.tensor(list(given), dtype=torch.float32, device=mask.device)
    return AdvantageInputs(rewards=rewards, mask=mask, group_ids=group_ids_from_index(index, n, mask.device),
                           token_rewards=token_level_rewards.float(), reward_weights=weights,
                           values=_float(values), logprobs=_float(logprobs), entropy=_float(entropy))


def _float(x: Tensor | None) -> Tensor | None:
    return None if x is None else x.float()


def group_ids_from_index(index: Any, n: int, device: torch.device | str = "cpu") -> Tensor:
    """(N,) int64 group ids from verl's ``index`` (uids of any hashable type), numbered in order of
    first appearance, so the same batch always maps the same way. None: every row its own group."""
    if index is None:
        return torch.arange(n, device=device)
    keys = index.tolist() if hasattr(index, "tolist") else list(index)  # numpy/torch → Python values
    if len(keys) != n:
        raise ValueError(f"index has {len(keys)} entries for {n} rows")
    codes: dict[Any, int] = {}
    ids = [codes.setdefault(key, len(codes)) for key in keys]
    return torch.tensor(ids, dtype=torch.int64, device=device)


class VerlPolicyLoss(_Adapter):
    """A verl policy-loss function backed by an rlvr ``PolicyLoss``, aggregated by verl's ``agg_loss``.

    Called as verl calls losses: ``old_log_prob, log_prob, advantages, response_mask`` (bs, T),
    ``loss_agg_mode``, ``config`` (the actor config) and ``rollout_is_weights`` (bs, T) or None,
    which multiply the per-token loss. A loss whose mechanism needs more (the off-policy token origin,
    the sampling engine's log-probs) is refused (:class:`VerlUnsupportedError`). Returns ``(loss,
    metrics)``; metric names follow verl's (``actor/pg_clipfrac``, ``actor/ppo_kl``,
    ``actor/pg_clipfrac_lower``), others are ``actor/<name>``.
    """

    kind = "loss"

    def __call__(self, old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
                 loss_agg_mode: str = "token-mean", config: Any = None,
                 rollout_is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:
        runtime = _plain(_get(_get(config, "policy_loss"), "rlvr_params"), "actor.policy_loss.rlvr_params")
        inputs = LossInputs(logprobs=log_prob, old_logprobs=old_log_prob, advantages=advantages,
                            mask=response_mask.bool())
        self.refuse_missing(inputs)
        out = self.build(_actor_knobs(config), runtime)(inputs)
        per_token = out.per_token  # (N, T)
        if rollout_is_weights is not None:
            per_token = per_token * rollout_is_weights
        batch_info = _plain(_get(config, "global_batch_info"), "actor.global_batch_info")
        loss = _core_algos().agg_loss(loss_mat=per_token, loss_mask=response_mask, loss_agg_mode=loss_agg_mode,
                                      **batch_info)
        metrics = {f"actor/{VERL_METRIC_NAMES.get(k, k)}": float(v) for k, v in out.metrics.items()}
        return loss, metrics


# --- registration ----------------------------------------------------------------------------

_ADAPTERS: dict[tuple[str, str], _Adapter] = {}  # (kind, verl name) → the one object verl holds


def register_with_verl(names: Mapping[str, str] | None = None,
                       params: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """Register rlvr plug-ins in verl's registries; returns the verl names registered.

    ``names``: None registers every rlvr advantage estimator and policy loss as ``rlvr_<name>``;
    a mapping ``{rlvr name: verl name}`` registers only those (a ``"pkg.module:Class"`` user
    plug-in is accepted as rlvr name). ``params``: ``{rlvr name: {field: value}}`` fixed at
    registration (layer 3 in the module doc); checked now, so a typo fails here, not mid-run.
    Safe to call again: the same adapter object is re-registered (with the new ``params``).
    A verl name already taken by something other than an rlvr adapter is refused.
    """
    core = _core_algos()
    plan = _plan(names)
    params = dict(params or {})
    unknown = sorted(set(params) - {rlvr_name for _, rlvr_name, _ in plan})
    if unknown:
        raise registry.RegistryError(f"register_with_verl: params for {unknown}, which are not being registered")
    registered = []
    for kind, rlvr_name, verl_name in plan:
        own = dict(params.get(rlvr_name, {}))
        try:
            registry.build(kind, rlvr_name, **own)  # validates the parameter names and values now
        except (TypeError, ValueError):
            if names is not None or rlvr_name in params:
                raise
            # Registering everything: a plug-in with required hyperparameters (armor's anchor_is_cap)
            # gets them from the run's knobs at call time, where a missing one is a clear error.
        adapter = _ADAPTERS.get((kind, verl_name))
        if adapter is None:
            _check_free(core, kind, verl_name)
            adapter = (VerlAdvantage if kind == "advantage" else VerlPolicyLoss)(rlvr_name, own, verl_name)
            _ADAPTERS[(kind, verl_name)] = adapter
        adapter.rlvr_name, adapter.params = rlvr_name, own
        if kind == "advantage":
            core.register_adv_est(verl_name)(adapter)
        else:
            core.register_policy_loss(verl_name)(adapter)
        registered.append(verl_name)
    return registered


def _plan(names: Mapping[str, str] | None) -> list[tuple[str, str, str]]:
    """(kind, rlvr name, verl name) for every plug-in to register."""
    if names is None:
        return [(kind, name, PREFIX + name) for kind in KINDS for name in registry.names(kind)]
    plan = []
    for rlvr_name, verl_name in names.items():
        kinds = [kind for kind in KINDS if _provides(kind, rlvr_name)]
        if not kinds:
            valid = sorted(set(registry.names("advantage")) | set(registry.names("loss")))
            raise registry.RegistryError(f"register_with_verl: '{rlvr_name}' is neither an rlvr advantage "
                                         f"estimator nor a policy loss; valid: {', '.join(valid)}")
        plan.extend((kind, rlvr_name, verl_name) for kind in kinds)
    return plan


def _provides(kind: str, name: str) -> bool:
    if ":" not in name:
        return name in registry.names(kind)
    base = AdvantageEstimator if kind == "advantage" else PolicyLoss
    cls = registry.get(kind, name)
    return isinstance(cls, type) and issubclass(cls, base)


def _check_free(core: ModuleType, kind: str, verl_name: str) -> None:
    """Refuse to shadow a verl function (verl would silently replace a policy loss)."""
    lookup = core.get_adv_estimator_fn if kind == "advantage" else core.get_policy_loss_fn
    try:
        existing = lookup(verl_name)
    except ValueError:
        return
    if not isinstance(existing, _Adapter):
        what = "an advantage estimator" if kind == "advantage" else "a policy loss"
        raise ValueError(f"register_with_verl: verl already has {what} named '{verl_name}' ({existing!r}); "
                         f"choose another verl name")


# --- verifiers as verl reward functions --------------------------------------------------------

_VERIFIERS: dict[tuple[str, str], Any] = {}  # (name, params as sorted repr) → built verifier, one per process


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
                  verifier: str = "math_verify", verifier_params: Mapping[str, Any] | None = None,
                  **kwargs: Any) -> dict[str, float]:
    """An rlvr verifier as verl's ``compute_score`` (same call as ``default_compute_score``).

    Point verl at it with ``reward.custom_reward_function.path=<this file>`` and
    ``...name=compute_score``; pick the verifier with ``...reward_kwargs.verifier=numeric`` (any
    registered rlvr verifier, default ``math_verify``) and its parameters with
    ``...reward_kwargs.verifier_params={timeout_s: 2}``. ``extra_info["rlvr_verifier"]`` (per
    row) overrides the name. ``data_source`` and other keywords verl passes are ignored.
    Returns ``{"score", "acc", "verifier_error"}``: verl takes ``score`` as the reward and logs the
    other keys; a time-out or error scores 0 with ``verifier_error = 1``. The limit is the
    verifier's own (``math_verify`` runs in a forked child), so it holds in the worker threads where
    verl's reward loop calls this and where a signal-based limit cannot work.
    """
    name = str((extra_info or {}).get("rlvr_verifier") or verifier)
    return make_compute_score(name, **dict(verifier_params or {}))(data_source, solution_str, ground_truth, extra_info)


def make_compute_score(verifier: Any = "math_verify", **params: Any) -> Callable[..., dict[str, float]]:
    """A verl ``compute_score`` function bound to one rlvr verifier (a name built with ``params``, or
    a :class:`rlvr.rewards.verifiers.Verifier`)."""
    from rlvr.rewards.verifiers import build_verifier
    from rlvr.types import Problem

    if isinstance(verifier, str):
        key = (verifier, repr(sorted(params.items())))
        if key not in _VERIFIERS:
            _VERIFIERS[key] = build_verifier(verifier, **params)
        verifier = _VERIFIERS[key]

    def score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
              **kwargs: Any) -> dict[str, float]:
        meta = dict(extra_info) if isinstance(extra_info, Mapping) else {}
        problem = Problem(str(meta.get("question", "")), None if ground_truth is None else str(ground_truth),
                          meta={"data_source": data_source, **meta})
        result = verifier.score(problem, solution_str)
        return {"score": float(result.value), "acc": float(result.value),
                "verifier_error": float(bool(result.meta.get("error")))}

    return score
