"""Building a run's parts from its config: model, tokenizer, task, plug-ins, optimizer, schedule."""

from __future__ import annotations

from typing import Any

import torch

from rlvr.losses.objective import Objective, ObjectiveConfig
from rlvr.lr_schedule import SCHEDULES, lr_schedule
from rlvr.registry import RegistryError, build, get
from rlvr.train.config import Config, ConfigError, PluginSpec
from rlvr.train.pipeline import Pipeline


def build_plugin(kind: str, spec: PluginSpec, cfg: Config | None = None) -> Any:
    """The plug-in of ``spec``; with the run's ``cfg``, parameters the plug-in ties to run settings
    (its class's ``run_defaults``, e.g. overlong's ``max_length`` → ``rollout.max_new_tokens``) are
    filled in from the config when the spec leaves them unset."""
    try:
        params = dict(spec.params)
        if cfg is not None:
            for key, path in getattr(get(kind, spec.name), "run_defaults", {}).items():
                if params.get(key) is None:
                    params[key] = _config_value(cfg, path)
        return build(kind, spec.name, **params)
    except (RegistryError, TypeError, ValueError) as err:
        raise ConfigError(f"{kind} '{spec.name}': {err}") from err


def _config_value(cfg: Config, path: str) -> Any:
    """The config value at a dotted ``path`` such as 'rollout.max_new_tokens'."""
    value: Any = cfg
    for part in path.split("."):
        value = getattr(value, part)
    return value


def build_task(cfg: Config) -> Any:
    """The task, probed once so a bad dataset (missing file or column) fails before any work."""
    task = build_plugin("task", PluginSpec(cfg.task.name, cfg.task.params))
    testbed_only = getattr(task, "testbed_only", "")  # what it needs of the tiny testbed model, if anything
    if cfg.model.path and testbed_only:
        raise ConfigError(f"task '{cfg.task.name}' cannot run on model.path={cfg.model.path}: {testbed_only}")
    task.problems(1, seed=0)
    return task


def build_objective(cfg: Config) -> Objective:
    algo = cfg.algorithm
    policy_loss = build_plugin("loss", algo.loss)
    return Objective(policy_loss, ObjectiveConfig(
        aggregation=algo.aggregation, kl_coef=algo.kl_coef, kl_estimator=algo.kl_estimator,
        entropy_coef=algo.entropy_coef))


def build_pipeline(cfg: Config) -> Pipeline:
    """Every plug-in of the run, built now so a bad name or key fails before any work is done."""
    algo = cfg.algorithm
    task = build_task(cfg)
    advantage = build_plugin("advantage", algo.advantage)
    teacher = None
    if getattr(advantage, "needs_first_mistake", False):  # e.g. cliff: a first-mistake teacher
        from rlvr.rewards.teacher import build_teacher
        try:
            teacher = build_teacher(algo.teacher.name, algo.teacher.params, task=task)
        except (RegistryError, TypeError, ValueError) as err:
            raise ConfigError(f"algorithm.advantage '{algo.advantage.name}' ({advantage.paper}) needs the first "
                              f"mistakes algorithm.teacher finds: {err}") from err
    if getattr(advantage, "needs_values", False) and not cfg.critic.enabled:
        raise ConfigError(f"algorithm.advantage '{algo.advantage.name}' reads critic values; set critic.enabled=true")
    sampler = build_plugin("sampler", cfg.rollout.sampler)
    testbed_only = getattr(sampler, "testbed_only", "")  # what it needs of the tiny testbed model, if anything
    if cfg.model.path and testbed_only:
        raise ConfigError(f"rollout.sampler '{cfg.rollout.sampler.name}' ({sampler.paper}) cannot run on "
                          f"model.path={cfg.model.path}: {testbed_only}")
    objective = build_objective(cfg)
    if sampler.produces_off_policy and not objective.policy_loss.handles_off_policy:
        raise ConfigError(f"rollout.sampler '{cfg.rollout.sampler.name}' trains tokens from another policy or "
                          f"context, but algorithm.loss '{cfg.algorithm.loss.name}' would treat them as on-policy; "
                          f"use an importance-corrected loss (oc_grpo, armor)")
    from rlvr.rewards.functions import reward_functions
    try:
        functions = reward_functions(algo.rewards)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return Pipeline(
        task=task,
        reward_functions=functions,
        teacher=teacher,
        sampler=sampler,
        selector=build_plugin("selector", algo.selector),
        advantage=advantage,
        objective=objective,
        shapers=[build_plugin("shaper", s, cfg) for s in algo.shapers],
        filters=[build_plugin("filter", f) for f in algo.filters],
        weightings=[build_plugin("weighting", w) for w in algo.weightings],
    )


def build_model(cfg: Config, acc: Any = None) -> tuple[torch.nn.Module, Any]:
    """The policy and tokenizer: a local checkpoint when ``model.path`` is set, else the tiny testbed
    model; in the configured dtype, attention kernel and gradient checkpointing (``precision``). With
    the run's accelerator ``acc`` (every rank calls), only the main process reads the checkpoint and
    the other ranks receive its weights (``rlvr.train.shared_load``)."""
    from rlvr.models import build_char_tokenizer, build_tiny_model, load_model, load_tokenizer
    from rlvr.train.precision import check_attention, configure_policy, load_dtype
    from rlvr.train.shared_load import load_shared
    m = cfg.model
    if m.path:
        check_attention(m.attn_implementation)  # a missing kernel fails before loading

        def load() -> torch.nn.Module:
            return load_model(m.path, dtype=load_dtype(cfg), attn_implementation=m.attn_implementation)

        model = load() if acc is None else load_shared(acc, load)
        return configure_policy(model, cfg), load_tokenizer(m.path)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, hidden=m.hidden, layers=m.layers, heads=m.heads, seed=cfg.run.seed)
    return configure_policy(model, cfg), tokenizer


def build_optimizer(cfg: Config, model: torch.nn.Module) -> tuple[torch.optim.Optimizer, Any]:
    """The torch optimizer ``optim.optimizer`` names (AdamW by default, ``rlvr.optim``) over the trainable
    parameters (in their own dtype: float32 master weights under mixed precision, a warning for half
    precision); the schedule counts optimizer steps, ``ppo_epochs`` × ``mini_batches`` per RL step."""
    from rlvr.train.precision import warn_half_updates
    o = cfg.optim
    params = [p for p in model.parameters() if p.requires_grad]
    warn_half_updates(params)
    maker = build_plugin("optimizer", PluginSpec(o.optimizer, o.optimizer_params))
    optimizer = maker.make(params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
    total = max(cfg.run.steps * o.ppo_epochs * o.mini_batches, 1)
    if o.schedule not in SCHEDULES:
        raise ConfigError(f"optim.schedule must be constant, linear or cosine, got '{o.schedule}'")
    return optimizer, lr_schedule(optimizer, o.schedule, o.warmup_steps, total)
