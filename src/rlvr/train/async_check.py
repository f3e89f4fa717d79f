"""Which runs may generate asynchronously (``rollout.async_rollout``), checked when the ``Config`` is built.

With ``max_staleness`` k >= 1 a row was sampled by a policy up to k optimizer steps older than the one
that trains on it, so a loss that takes the recomputed log-probs of the current policy as the
behaviour policy (the on-policy assumption of ``optim.old_logprobs: recompute`` with plain PPO-clip)
would treat lagged rows as on-policy. Two corrections are accepted:

* ``algorithm.loss: ppo_clip_is`` (any ``is_mode`` but ``none``): the ratio's denominator is the
  recomputed proximal policy (the trainer's weights before the update) and every token is weighted by
  the truncated importance weight ``min(π_prox / π_behaviour, C)`` — decoupled PPO (AReaL) with
  IMPALA's truncation;
* ``optim.old_logprobs: rollout`` with a ratio-clipped loss (ppo_clip, ppo_clip_is, gspo, cispo): the
  ratio is taken against the generator's own log-probs, so the clip bounds the step from the policy
  that actually sampled the row (verl's bypass mode).

Everything else is refused with one line naming the fix.
"""

from __future__ import annotations

from typing import Any

RATIO_LOSSES = ("ppo_clip", "ppo_clip_is", "gspo", "cispo")
WORKER_ENGINES = ("loop", "hf")


def check_async(cfg: Any) -> None:
    """Raise ``ValueError`` when ``cfg`` cannot run with ``rollout.async_rollout`` as set."""
    a, loss = cfg.rollout.async_rollout, cfg.algorithm.loss
    where = "rollout.async_rollout"
    if not cfg.optim.plugin_class().gradient_knobs:  # the gradient Trainer's collector is what goes async
        raise ValueError(f"{where}: optimizer '{cfg.optim.name}' runs its own loop; asynchronous generation "
                         f"needs the gradient trainer (optim.name=adamw)")
    if cfg.rollout.sampler.name != "plain":
        raise ValueError(f"{where}: the generator process runs the plain sampler only, got rollout.sampler="
                         f"'{cfg.rollout.sampler.name}' (it reads the verifier or a reference in the trainer)")
    if cfg.rollout.engine.name not in WORKER_ENGINES:
        raise ValueError(f"{where}: the generator process runs rollout.engine {' | '.join(WORKER_ENGINES)}, "
                         f"got '{cfg.rollout.engine.name}'")
    if cfg.critic.enabled:
        raise ValueError(f"{where}: a critic is not supported with asynchronous generation (critic.enabled=false)")
    if a.max_staleness == 0:
        return  # in_worker, k = 0: every row comes from the trainer's current weights
    is_corrected = loss.name == "ppo_clip_is" and loss.params.get("is_mode", "token_truncate") != "none"
    bypass = cfg.optim.old_logprobs == "rollout" and loss.name in RATIO_LOSSES
    if not (is_corrected or bypass):
        raise ValueError(f"{where}.max_staleness={a.max_staleness}: rows lag the policy, but loss "
                         f"'{loss.name}' with optim.old_logprobs={cfg.optim.old_logprobs} treats them as "
                         f"on-policy; use algorithm.loss.name=ppo_clip_is (truncated IS against the "
                         f"generator's log-probs) or optim.old_logprobs=rollout with one of "
                         f"{', '.join(RATIO_LOSSES)}")


def correction_of(cfg: Any) -> str:
    """One line naming the off-policy correction the run applies (for the run's log)."""
    if cfg.rollout.async_rollout.max_staleness == 0:
        return "none (on-policy)"
    if cfg.algorithm.loss.name == "ppo_clip_is":
        return f"truncated IS (ppo_clip_is) against the generator's log-probs, ratio vs {cfg.optim.old_logprobs}"
    return f"{cfg.algorithm.loss.name} ratio against the generator's log-probs (optim.old_logprobs=rollout)"
