"""FADE: Dr. GRPO advantages with a focal difficulty weight and a negative-sign weight, both
scheduled by the policy entropy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput, sequence_scores
from rlvr.ops import broadcast_to_tokens, group_stats, masked_sum
from rlvr.registry import param, register
from rlvr.types import AdvantageInputs, BatchError

ETA_MAPS = ("linear_clip",)


@dataclass(frozen=True)
class FADEConfig:
    focal_gamma: float = param(1.0, "γ of the focal weights (1 − p)^γ and (4p(1 − p))^γ (RECONSTRUCTION)")
    lambda_min: float = param(0.3, "weight of negative advantages when fully exploiting (η = 0), in [0, 1] "
                                   "(RECONSTRUCTION)")
    entropy_target: float = param(0.0, "H_target of η = H̄/H_target (RECONSTRUCTION); 0 = the mean entropy of "
                                       "the first batch seen (kept in the plug-in's state)")
    eta_map: str = param("linear_clip", "entropy → η map (RECONSTRUCTION): 'linear_clip' = clip(H̄/H_target, 0, 1)")

    def __post_init__(self) -> None:
        if self.focal_gamma < 0:
            raise ValueError(f"fade: focal_gamma must be >= 0, got {self.focal_gamma}")
        if not 0.0 <= self.lambda_min <= 1.0:
            raise ValueError(f"fade: lambda_min must be in [0, 1], got {self.lambda_min}")
        if self.entropy_target < 0:
            raise ValueError(f"fade: entropy_target must be > 0 (or 0 = the first batch's entropy), "
                             f"got {self.entropy_target}")
        if self.eta_map not in ETA_MAPS:
            raise ValueError(f"fade: eta_map must be one of {ETA_MAPS}, got '{self.eta_map}'")


@register("advantage", "fade")
class FADE(AdvantageEstimator):
    """Focal advantage with dynamic entropy: difficulty and sign weights scheduled by the entropy.

    Dr. GRPO advantages reweighted by prompt difficulty and by sign, on a schedule read from the
    batch entropy (explore ↔ exploit).

    Paper: FADE, Focal Advantage with Dynamic Entropy (seed abstract, docs/methods.md §2.29; arXiv id
    unknown). A RECONSTRUCTION throughout: the entropy → η map, the entropy target, the focal
    blend of hard and medium focus, and the negative-sign schedule are the team's reading of the
    abstract, exposed as Config options.

    Equation: ``Â_i = r_i − p̂_x`` (group mean p̂_x), ``η = clip(H̄/H_target, 0, 1)``,
    ``d(p) = η(1 − p)^γ + (1 − η)(4p(1 − p))^γ``, ``λ⁻ = η + (1 − η)λ_min``, ``λ⁺ = 1``,
    ``A_i = d(p̂_x)·([Â_i]₊ − λ⁻[Â_i]₋)`` on every trained token of row i. H̄ is the mean of the
    policy's token entropies ``AdvantageInputs.entropy`` over the trained tokens of the *global*
    batch (``needs_entropy``: the trainer computes them with the policy that sampled the batch, and
    sums them over data-parallel ranks through ``batch_stats``). Only a caller without entropies
    (the verl adapter, when its caller passes ``old_log_probs``) falls back to ``−mean(logprobs)`` of
    the sampled tokens, a noisy estimate that is biased under top-p / top-k sampling. verl's own
    trainer passes neither, so there the adapter refuses fade (docs/scaling.md, verl).

    Differs from dr_grpo:
      * healthy entropy (η → 1): hard prompts weigh more, (1 − p)^γ, and signs stay balanced;
      * low entropy (η → 0): medium prompts weigh more, (4p(1 − p))^γ, and negative advantages
        shrink to λ_min; γ = 0 with η = 1 is dr_grpo;
      * rewards must lie in [0, 1]; a group of one row gets A = 0.
    Metrics: ``pos_mass``/``neg_mass`` = Σ[A]₊/N and Σ[A]₋/N of the final advantages, ``eta``,
    ``entropy``, ``entropy_target``, ``lambda_neg``.

    State: H_target (from the first batch when ``entropy_target = 0``), saved by ``state_dict``;
    the trainer must save and restore it for an exact resume. The verl adapter keeps one instance per
    name, so the target holds from call to call within a process; it saves no state with verl's
    checkpoints.

    Shapes: rewards (N, K) or token_rewards (N, T), group_ids (N,), entropy or logprobs (N, T)
    → advantages (N, T).
    """

    Config = FADEConfig
    mechanism_inputs = (("entropy", "logprobs"),)  # the sampling policy's token entropies
    paper = "FADE: Focal Advantage with Dynamic Entropy (arXiv id unknown; seed abstract)"
    needs_entropy = True

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._target: float | None = None  # H_target read from the first batch

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        cfg = self.config
        scores = sequence_scores(inputs)  # (N,)
        if scores.numel() and (bool((scores < 0).any()) or bool((scores > 1).any())):
            raise BatchError(f"fade: rewards must lie in [0, 1] (pass rates), got "
                             f"[{float(scores.min()):.4g}, {float(scores.max()):.4g}]")
        p = group_stats(scores, inputs.group_ids, ddof=0).mean  # (N,) pass rate of the row's group
        centred = scores - p  # (N,) Dr. GRPO
        stats = self.stats(inputs)
        entropy = float(stats["entropy_sum"] / stats["tokens"].clamp(min=1))
        eta = self._eta(entropy)
        lam_neg = negative_weight(eta, cfg.lambda_min)
        d = focal_weight(p, eta, cfg.focal_gamma)  # (N,)
        adv = d * (centred.clamp(min=0) - lam_neg * (-centred).clamp(min=0))  # (N,)
        n = max(adv.numel(), 1)
        metrics = {"pos_mass": adv.clamp(min=0).sum() / n, "neg_mass": (-adv).clamp(min=0).sum() / n,
                   "eta": torch.tensor(eta), "entropy": torch.tensor(entropy),
                   "entropy_target": torch.tensor(self._current_target()), "lambda_neg": torch.tensor(lam_neg)}
        return AdvantageOutput(broadcast_to_tokens(adv, inputs.mask), metrics=metrics)

    def batch_stats(self, inputs: AdvantageInputs) -> dict[str, Tensor]:
        """Σ entropy over trained tokens and their count (float64), for the global mean H̄."""
        return {"entropy_sum": masked_sum(token_entropy(inputs), inputs.mask),
                "tokens": inputs.mask.sum().double()}

    def _eta(self, entropy: float) -> float:
        """η = clip(H̄/H_target, 0, 1); the first batch sets H_target when none is configured."""
        if self.config.entropy_target == 0 and self._target is None:
            self._target = entropy
        target = self._current_target()
        if target <= 0:  # a zero-entropy start: no scale to compare with, stay exploring
            return 1.0
        return min(max(entropy / target, 0.0), 1.0)

    def _current_target(self) -> float:
        return self.config.entropy_target or (self._target if self._target is not None else 0.0)

    def state_dict(self) -> dict[str, Any]:
        """H_target read from the first batch (plain floats; empty before that or when configured)."""
        return {} if self._target is None else {"entropy_target": self._target}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        value = state.get("entropy_target")
        self._target = None if value is None else float(value)


def token_entropy(inputs: AdvantageInputs) -> Tensor:
    """(N, T) float64 token entropies: ``entropy`` when given, else ``−logprobs`` of the sampled tokens."""
    if inputs.entropy is not None:
        return inputs.entropy.double()
    if inputs.logprobs is not None:
        return -inputs.logprobs.double()
    raise BatchError("fade: needs AdvantageInputs.entropy or AdvantageInputs.logprobs (N, T) to read the "
                     "batch entropy; neither was given")


def focal_weight(p: Tensor, eta: float, gamma: float) -> Tensor:
    """(N,) ``η(1 − p)^γ + (1 − η)(4p(1 − p))^γ``: hard focus blended with medium focus."""
    q = (1 - p).clamp(min=0)  # clamps keep fractional γ real at p = 0 or 1 after rounding
    return eta * q ** gamma + (1 - eta) * (4 * p * q).clamp(min=0) ** gamma


def negative_weight(eta: float, lambda_min: float) -> float:
    """``λ⁻ = η + (1 − η)λ_min``: 1 while exploring, λ_min when exploiting; non-decreasing in η."""
    return eta + (1 - eta) * lambda_min
