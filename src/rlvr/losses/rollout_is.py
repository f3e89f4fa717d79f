"""PPO-clip with an importance correction for the mismatch between the sampling engine and the trainer.

An inference engine (vLLM, or any engine whose kernels differ from the trainer's forward) samples
from ``π_rollout`` while the trainer computes ``π_old`` for the same weights; the two differ by
numerics (and by top-k / top-p when the engine reports filtered log-probs). Weighting each token's
PPO loss by ``ρ = π_old / π_rollout`` (detached, truncated or masked) removes the bias that
mismatch would put in the gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import Tensor

from rlvr.losses.base import masked_fraction
from rlvr.losses.ppo_clip import PPOClip, PPOClipConfig
from rlvr.ops import masked_mean
from rlvr.registry import param, register
from rlvr.types import BatchError, LossInputs, LossOutput

ROLLOUT_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask", "none")


@dataclass(frozen=True)
class RolloutISConfig(PPOClipConfig):
    is_mode: str = param("token_truncate", "engine-mismatch weight: token_truncate | token_mask | sequence_truncate "
                                           "| sequence_mask | none (plain ppo_clip)")
    is_cap: float = param(2.0, "C_max: truncate rho above it (truncate modes) or drop tokens/sequences above it "
                               "(mask modes); verl rollout_is_threshold 2.0, TRL 3.0")
    is_min: float = param(0.0, "C_min: raise rho to it (truncate) or drop below it (mask); 0 = no lower bound")
    is_log_clamp: float = param(20.0, "clamp log rho to +-this before exp")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.is_mode not in ROLLOUT_IS_MODES:
            raise ValueError(f"ppo_clip_is: unknown is_mode '{self.is_mode}'; valid: {', '.join(ROLLOUT_IS_MODES)}")
        if not 0.0 <= self.is_min < self.is_cap:
            raise ValueError(f"ppo_clip_is: need 0 <= is_min < is_cap, got {self.is_min}, {self.is_cap}")


def rollout_is_weights(old_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor, mode: str, cap: float,
                       floor: float, log_clamp: float) -> tuple[Tensor, Tensor]:
    """(N, T) detached weights from ``ρ = exp(old − rollout)`` and (N, T) bool "ρ was cut".

    Token modes use each token's ρ; sequence modes use ``exp(Σ_t∈mask (old − rollout))`` for every
    token of the row. Truncate: ``clamp(ρ, floor, cap)``; mask: ``ρ·1[floor ≤ ρ ≤ cap]``.
    """
    diff = ((old_logprobs - rollout_logprobs) * mask).detach()  # (N, T), 0 off the mask
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True).expand_as(diff)  # (N, T): the row's log-ratio everywhere
    rho = diff.clamp(-log_clamp, log_clamp).exp()
    cut = (rho > cap) | (rho < floor)
    if mode.endswith("truncate"):
        return rho.clamp(min=floor, max=cap), cut
    return torch.where(cut, torch.zeros_like(rho), rho), cut


@register("loss", "ppo_clip_is")
class PPOClipRolloutIS(PPOClip):
    """PPO-clip times a truncated (or masked) importance weight for engine/trainer mismatch.

    Paper: truncated importance weights for a lagging behaviour policy, IMPALA (Espeholt et al.,
    arXiv:1802.01561); applied to engine/trainer mismatch by Yao et al., "Your Efficient RL
    Framework Secretly Brings You Off-Policy RL Training" (blog, 2025), verl's ``rollout_is`` and
    TRL's ``vllm_importance_sampling_mode`` (the mask modes). PPO: arXiv:1707.06347.

    Equation, with ``ρ_t = exp(log π_old(y_t) − log π_rollout(y_t))`` (both detached):
      ``ℓ_t = w_t · ℓ^ppo_clip_t``; token_truncate ``w_t = min(ρ_t, C)`` (and ``≥ C_min``);
      token_mask ``w_t = ρ_t·1[C_min ≤ ρ_t ≤ C]``; sequence modes use ``ρ = Π_t ρ_t`` per row.

    Differs from ppo_clip:
      * reads ``LossInputs.rollout_logprobs`` (the engine's) and reweights every token by ``w``;
      * ``is_mode: none`` (or ``π_rollout = π_old``, so ``ρ = 1 ≤ C``) gives ppo_clip exactly;
      * metrics ``is_ratio_mean`` (over trained tokens), ``is_ratio_max``, ``is_cutfrac``.

    Shapes: logprobs, old_logprobs, rollout_logprobs, advantages, mask (N, T) → per_token (N, T).
    """

    Config = RolloutISConfig
    mechanism_inputs = (("rollout_logprobs",),)  # the sampling engine's log-probs
    paper = ("IMPALA: Scalable Distributed Deep-RL with Importance Weighted Actor-Learner Architectures "
             "(arXiv:1802.01561)")

    @classmethod
    def corrects_staleness(cls, params: Mapping[str, Any]) -> bool:
        """Every is_mode but ``none`` weights a lagged row by ``π_prox / π_behaviour`` (decoupled PPO)."""
        return params.get("is_mode", RolloutISConfig.is_mode) != "none"

    def __call__(self, inputs: LossInputs) -> LossOutput:
        out = super().__call__(inputs)
        cfg = self.config
        if cfg.is_mode == "none":
            return out
        if inputs.rollout_logprobs is None:
            raise BatchError("ppo_clip_is: needs LossInputs.rollout_logprobs (the sampling engine's log-probs)")
        mask = inputs.mask
        weight, cut = rollout_is_weights(inputs.old_logprobs, inputs.rollout_logprobs, mask, cfg.is_mode,
                                         cfg.is_cap, cfg.is_min, cfg.is_log_clamp)  # (N, T)
        rho = (inputs.old_logprobs - inputs.rollout_logprobs).detach().clamp(-cfg.is_log_clamp, cfg.is_log_clamp)
        metrics = dict(out.metrics)
        metrics["is_ratio_mean"] = masked_mean(rho.exp(), mask)
        metrics["is_ratio_max"] = rho.exp()[mask].max() if bool(mask.any()) else torch.zeros(())
        metrics["is_cutfrac"] = masked_fraction(cut, mask)
        return LossOutput(per_token=out.per_token * weight, metrics=metrics)
