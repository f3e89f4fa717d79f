"""Which runs may generate asynchronously (``rollout.async_rollout``), checked when the ``Config`` is built.

With ``max_staleness`` k >= 1 a row was sampled by a policy up to k optimizer steps older than the one
that trains on it, so a loss that takes the recomputed log-probs of the current policy as the
behaviour policy (the on-policy assumption of ``optim.old_logprobs: recompute`` with plain PPO-clip)
would treat lagged rows as on-policy. Two corrections are accepted:

* a loss whose ``corrects_staleness(params)`` holds (``ppo_clip_is``, any ``is_mode`` but ``none``):
  the ratio's denominator is the recomputed proximal policy (the trainer's weights before the update)
  and every token is weighted by the truncated importance weight ``min(π_prox / π_behaviour, C)`` —
  decoupled PPO (AReaL) with IMPALA's truncation;
* ``optim.old_logprobs: rollout`` with a loss whose class sets ``ratio_clipped`` (ppo_clip, ppo_clip_is,
  gspo, cispo): the ratio is taken against the generator's own log-probs, so the clip bounds the step
  from the policy that actually sampled the row (verl's bypass mode).

The generator process runs only samplers and engines whose class sets ``runs_in_worker``. The rules
read these traits through the registry; no plug-in name is listed here.
Everything else is refused with one line naming the fix.

Where the policy lives on an accelerator (a CUDA GPU, or any device but the CPU), asynchronous
generation is refused when the trainer is built (:func:`check_async_device`): the generator process
holds a CPU copy of the policy with ``generator_threads`` threads and takes its weights over gloo
through host memory, so on a GPU machine it would turn GPU rollouts into CPU rollouts. A worker on a
device of its own (a second GPU, NCCL or CUDA-IPC sync) is not built.
"""

from __future__ import annotations

from typing import Any

from rlvr.registry import get, names


def check_async(cfg: Any) -> None:
    """Raise ``ValueError`` when ``cfg`` cannot run with ``rollout.async_rollout`` as set. Each rule asks
    the plug-ins' class traits (``runs_in_worker``, ``ratio_clipped``, ``corrects_staleness``)."""
    a, loss = cfg.rollout.async_rollout, cfg.algorithm.loss
    where = "rollout.async_rollout"
    if not cfg.optim.plugin_class().gradient_knobs:  # the gradient Trainer's collector is what goes async
        raise ValueError(f"{where}: loop '{cfg.optim.name}' runs its own loop; asynchronous generation "
                         f"needs the gradient trainer (optim.name=gradient)")
    sampler, engine = cfg.rollout.sampler, cfg.rollout.engine
    if not _trait(sampler.plugin_class("sampler"), "runs_in_worker"):
        raise ValueError(f"{where}: the generator process runs the {_with('sampler', 'runs_in_worker')} sampler "
                         f"only, got rollout.sampler='{sampler.name}' (it reads the verifier or a reference in "
                         f"the trainer)")
    if not _trait(engine.plugin_class("engine"), "runs_in_worker"):
        raise ValueError(f"{where}: the generator process runs rollout.engine {_with('engine', 'runs_in_worker')}, "
                         f"got '{engine.name}'")
    if cfg.critic.enabled:
        raise ValueError(f"{where}: a critic is not supported with asynchronous generation (critic.enabled=false)")
    if a.max_staleness == 0:
        return  # in_worker, k = 0: every row comes from the trainer's current weights
    if not (_corrects_staleness(loss) or _bypass(cfg)):
        raise ValueError(f"{where}.max_staleness={a.max_staleness}: rows lag the policy, but loss "
                         f"'{loss.name}' with optim.old_logprobs={cfg.optim.old_logprobs} treats them as "
                         f"on-policy; use algorithm.loss.name=ppo_clip_is (truncated IS against the "
                         f"generator's log-probs) or optim.old_logprobs=rollout with one of "
                         f"{_with('loss', 'ratio_clipped', ', ')}")


def correction_of(cfg: Any) -> str:
    """One line naming the off-policy correction the run applies (for the run's log)."""
    loss = cfg.algorithm.loss
    if cfg.rollout.async_rollout.max_staleness == 0:
        return "none (on-policy)"
    if _corrects_staleness(loss):
        return f"truncated IS ({loss.name}) against the generator's log-probs, ratio vs {cfg.optim.old_logprobs}"
    return f"{loss.name} ratio against the generator's log-probs (optim.old_logprobs=rollout)"


def _bypass(cfg: Any) -> bool:
    """A ratio-clipped loss whose ratio is taken against the generator's own log-probs (verl's bypass)."""
    return cfg.optim.old_logprobs == "rollout" and _trait(cfg.algorithm.loss.plugin_class("loss"), "ratio_clipped")


def _corrects_staleness(loss: Any) -> bool:
    """The loss plug-in's ``corrects_staleness(params)``; False for a class without it (a user callable)."""
    check = getattr(loss.plugin_class("loss"), "corrects_staleness", None)
    return bool(check(loss.params)) if callable(check) else False


def _trait(cls: type, trait: str) -> bool:
    return bool(getattr(cls, trait, False))


def _with(kind: str, trait: str, sep: str = " | ") -> str:
    """The registered names of ``kind`` whose class sets ``trait`` (for the messages)."""
    return sep.join(n for n in names(kind) if _trait(get(kind, n), trait))


def check_async_device(cfg: Any, device: Any) -> None:
    """Raise ``ValueError`` when ``rollout.async_rollout`` asks for the generator process while the
    policy lives on ``device`` other than the CPU (the worker would generate on the CPU)."""
    a = cfg.rollout.async_rollout
    if not a.enabled or device.type == "cpu":
        return
    setting = f"max_staleness={a.max_staleness}" if a.max_staleness else "in_worker=true"
    raise ValueError(f"rollout.async_rollout.{setting} is not supported with the policy on {device}: the generator "
                     f"process holds a CPU copy of the policy ({a.generator_threads} thread(s)) and takes weights "
                     f"over gloo, so {device.type} rollouts would become CPU rollouts; set "
                     f"rollout.async_rollout.max_staleness=0 and in_worker=false to generate on {device.type} in "
                     f"the trainer, or generate with vLLM (rollout.engine=vllm, or vllm_server on GPUs of its own)")
