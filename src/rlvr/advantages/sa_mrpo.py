"""SA-MRPO: per-objective group standardisation, discounted by each objective's batch saturation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput
from rlvr.advantages.whitening import whiten
from rlvr.ops import broadcast_to_tokens, group_stats
from rlvr.registry import param, register
from rlvr.types import AdvantageInputs, BatchError


@dataclass(frozen=True)
class SAMRPOConfig:
    saturation_gamma: float = param(1.0, "γ of the discount (1 − s_k)^γ (RECONSTRUCTION); "
                                         "0 = plain GDPO weights")
    base_weights: list = param([], "w⁰_k per objective (RECONSTRUCTION); empty = AdvantageInputs.reward_weights "
                                   "when given, else uniform")
    reward_bounds: list = param([], "[[lo, hi], ...] per objective, for saturation (mean − lo)/(hi − lo) of "
                                    "non-binary rewards; empty = every objective in [0, 1]")
    batch_whiten: bool = param(False, "whiten the weighted sum over the batch's trained tokens (GDPO-style)")
    saturation_ema: float = param(0.0, "β of an EMA of the saturation across steps, s ← β·s_prev + (1−β)·s_batch "
                                       "(kept in the plug-in's state); 0 = this batch only")
    ddof: int = param(1, "group std estimator: 1 = unbiased (verl, TRL), 0 = population")
    eps: float = param(1e-6, "added to the group std before dividing (verl 1e-6)")
    whiten_ddof: int = param(1, "variance estimator of the batch whitening: 1 = unbiased (verl)")
    whiten_eps: float = param(1e-8, "eps of the batch whitening, inside the root (verl)")

    def __post_init__(self) -> None:
        if self.saturation_gamma < 0:
            raise ValueError(f"sa_mrpo: saturation_gamma must be >= 0, got {self.saturation_gamma}")
        if not 0.0 <= self.saturation_ema < 1.0:
            raise ValueError(f"sa_mrpo: saturation_ema must be in [0, 1), got {self.saturation_ema}")
        if any(w < 0 for w in self.base_weights):
            raise ValueError(f"sa_mrpo: base_weights must be >= 0, got {self.base_weights}")
        for b in self.reward_bounds:
            if len(b) != 2 or not b[1] > b[0]:
                raise ValueError(f"sa_mrpo: each reward_bounds entry must be [lo, hi] with hi > lo, got {b}")


@register("advantage", "sa_mrpo")
class SAMRPO(AdvantageEstimator):
    """Saturation-aware multi-reward advantage: GDPO with weights discounted by batch saturation.

    Each objective is standardised within its group (GDPO), and its weight shrinks with how
    saturated it already is over the batch.

    Paper: SA-MRPO, saturation-aware multi-reward advantage reweighting (seed abstract, docs/methods.md §2.9;
    arXiv id unknown); baseline GDPO (arXiv:2601.05242). A RECONSTRUCTION from the abstract: the
    saturation formula s_k, the discount (1 − s_k)^γ and its normalisation to sum K, the base weights,
    the optional EMA and the optional whitening are the team's reading, exposed as Config options.

    Equation: ``Â_ik = (r_ik − mean_g r_k)/(std_g r_k + eps)`` (0 when the group std is 0; a group of
    one row: mean 0, std 1, as grpo), ``s_k = (mean_batch r_k − lo_k)/(hi_k − lo_k)``,
    ``w_k = K·w⁰_k(1 − s_k)^γ / Σ_j w⁰_j(1 − s_j)^γ`` (all 0 when the sum is 0),
    ``A_i = Σ_k w_k Â_ik``, optionally whitened over the batch, on every trained token of row i.

    Differs from gdpo:
      * objective weights shrink as the objective saturates, moving the gradient budget to
        under-optimised objectives (an advantage can change sign);
      * the weights are normalised to sum K, so equal saturations give GDPO's uniform weights;
      * batch whitening is off by default (``batch_whiten``).

    With K = 1 the weight is 1 (unless the batch is fully saturated, where every Â is 0 anyway):
    the estimator is grpo (``min_objectives = 2``: the verl adapter, whose trainer passes one
    objective, refuses it). Stateful only with ``saturation_ema > 0`` (``state_dict``).

    Under data parallelism s_k and the optional whitening are the global batch's (``batch_stats``
    summed over ranks).

    Shapes: rewards (N, K), reward_weights (K,), group_ids (N,) → advantages (N, T).
    """

    Config = SAMRPOConfig
    min_objectives = 2  # with one objective the weight is 1: grpo
    paper = "SA-MRPO: saturation-aware multi-reward advantage reweighting (arXiv id unknown; seed abstract)"

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._saturation: Tensor | None = None  # (K,) EMA state, float64

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        cfg = self.config
        rewards = inputs.rewards.float()  # (N, K)
        k = rewards.shape[1]
        std_adv = self._std_adv(inputs)  # (N, K)
        saturation = self._track(self._saturation_of(rewards, self.stats(inputs)))  # (K,)
        weights = saturation_weights(saturation, self._base_weights(inputs, k), cfg.saturation_gamma)  # (K,)
        total = std_adv @ weights.to(device=std_adv.device, dtype=std_adv.dtype)  # (N,)
        if cfg.batch_whiten:
            sums = None if inputs.global_stats is None else _weighted_sums(inputs.global_stats, weights)
            adv = whiten(broadcast_to_tokens(total, inputs.mask), inputs.mask, cfg.whiten_ddof, cfg.whiten_eps,
                         sums) * inputs.mask
        else:
            adv = broadcast_to_tokens(total, inputs.mask)
        metrics = {}
        for j in range(k):
            metrics[f"saturation_{j}"] = saturation[j].float()
            metrics[f"weight_{j}"] = weights[j].float()
        return AdvantageOutput(adv, metrics=metrics)

    def _std_adv(self, inputs: AdvantageInputs) -> Tensor:
        """(N, K) every objective group-standardised."""
        rewards = inputs.rewards.float()  # (N, K)
        return torch.stack([self._standardise(rewards[:, j], inputs.group_ids) for j in range(rewards.shape[1])],
                           dim=1)

    def _standardise(self, r: Tensor, group_ids: Tensor) -> Tensor:
        """(N,) one objective → its group-standardised value (grpo's conventions, 0 for zero std)."""
        stats = group_stats(r, group_ids, ddof=self.config.ddof)
        single = stats.count == 1
        mean = torch.where(single, torch.zeros_like(stats.mean), stats.mean)
        std = torch.where(single, torch.ones_like(stats.std), stats.std)
        out = (r - mean) / (std + self.config.eps)
        return torch.where(std == 0, torch.zeros_like(out), out)  # no NaN even with eps = 0

    def batch_stats(self, inputs: AdvantageInputs) -> dict[str, Tensor]:
        """Σ_i r_ik per objective (K,) and the row count (float64), for the global batch mean; with
        ``batch_whiten`` also the token-weighted Σ_i c_i Â_ik (K,) and Σ_i c_i Â_i Â_iᵀ (K, K), c_i the row's
        trained tokens: Σ and Σ² of the weighted sum Σ_k w_k Â_ik for any weights w (known only after the
        saturation is global)."""
        r = inputs.rewards.double()
        out = {"reward_sum": r.sum(dim=0), "rows": torch.tensor(float(r.shape[0]), dtype=torch.float64,
                                                                device=r.device)}
        if self.config.batch_whiten:
            a = self._std_adv(inputs).double()  # (N, K)
            c = inputs.mask.sum(-1).double()  # (N,)
            out.update({"whiten_lin": a.T @ c, "whiten_gram": a.T @ (a * c.unsqueeze(-1)), "whiten_count": c.sum()})
        return out

    def _saturation_of(self, rewards: Tensor, stats: dict[str, Tensor]) -> Tensor:
        """(N, K) → (K,) global batch saturation in [0, 1] from the summed ``stats``; rewards outside
        the bounds are an error."""
        k = rewards.shape[1]
        bounds = self.config.reward_bounds or [[0.0, 1.0]] * k
        if len(bounds) != k:
            raise BatchError(f"sa_mrpo: reward_bounds has {len(bounds)} entries for K={k} objectives")
        lo = torch.tensor([b[0] for b in bounds], dtype=torch.float64)  # (K,)
        hi = torch.tensor([b[1] for b in bounds], dtype=torch.float64)  # (K,)
        r = rewards.double().cpu()
        bad = ((r < lo) | (r > hi)).any(dim=0)  # (K,)
        if bool(bad.any()):
            j = int(bad.nonzero()[0])
            raise BatchError(f"sa_mrpo: objective {j} has rewards in [{r[:, j].min():.4g}, {r[:, j].max():.4g}], "
                             f"outside its bounds [{lo[j]:.4g}, {hi[j]:.4g}]; set reward_bounds")
        mean = stats["reward_sum"].cpu() / stats["rows"].cpu()  # (K,) mean over the global batch
        return (mean - lo) / (hi - lo)

    def _track(self, batch_saturation: Tensor) -> Tensor:
        """Blend with the EMA state when ``saturation_ema > 0``; returns (K,) on the rewards' device."""
        beta = self.config.saturation_ema
        s = batch_saturation
        if beta > 0:
            if self._saturation is not None and self._saturation.shape != s.shape:
                raise BatchError(f"sa_mrpo: saturation state has K={self._saturation.numel()}, batch has K={s.numel()}")
            s = s if self._saturation is None else beta * self._saturation + (1 - beta) * s
            self._saturation = s.clone()
        return s

    def _base_weights(self, inputs: AdvantageInputs, k: int) -> Tensor:
        if self.config.base_weights:
            if len(self.config.base_weights) != k:
                raise BatchError(f"sa_mrpo: base_weights has {len(self.config.base_weights)} entries for K={k}")
            return torch.tensor(self.config.base_weights, dtype=torch.float64)
        if inputs.reward_weights is not None:
            w = inputs.reward_weights.detach().double().cpu()
            if bool((w < 0).any()):
                raise BatchError(f"sa_mrpo: reward_weights must be >= 0, got {w.tolist()}")
            return w
        return torch.ones(k, dtype=torch.float64)

    def state_dict(self) -> dict[str, Any]:
        """The saturation EMA (plain floats; empty before the first call or with the EMA off)."""
        return {} if self._saturation is None else {"saturation": self._saturation.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        s = state.get("saturation")
        self._saturation = None if s is None else torch.tensor(s, dtype=torch.float64)


def _weighted_sums(stats: dict[str, Tensor], weights: Tensor) -> dict[str, Tensor]:
    """``moment_sums`` of Σ_k w_k Â_ik over the global batch's trained tokens from the summed
    ``whiten_lin`` (K,), ``whiten_gram`` (K, K) and ``whiten_count``."""
    w = weights.double().to(stats["whiten_lin"].device)  # (K,)
    return {"whiten_sum": w @ stats["whiten_lin"], "whiten_sq": w @ stats["whiten_gram"] @ w,
            "whiten_count": stats["whiten_count"]}


def saturation_weights(saturation: Tensor, base: Tensor, gamma: float) -> Tensor:
    """(K,) ``w_k = K·w⁰_k(1 − s_k)^γ / Σ_j w⁰_j(1 − s_j)^γ``; all 0 when the denominator is 0."""
    raw = base.to(saturation.device).double() * (1.0 - saturation.double()).clamp(min=0.0) ** gamma  # (K,)
    total = raw.sum()
    if float(total) <= 0.0:
        return torch.zeros_like(raw)
    return raw * raw.numel() / total
