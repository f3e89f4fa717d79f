"""CVPO: value-variance-aware scaling of a critic-based advantage, per reward type."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput, sequence_scores
from rlvr.ops import masked_mean, masked_sum
from rlvr.registry import build, param, register
from rlvr.types import AdvantageInputs, BatchError

PARENT = "parent."  # prefix of the parent estimator's statistics in batch_stats


@dataclass(frozen=True)
class CVPOConfig:
    parent: str = param("la_gae", "the critic-based estimator whose advantages are scaled (VAPO-style "
                                  "length-adaptive GAE by default; 'gae' also works)")
    parent_params: dict = param({}, "hyperparameters of the parent estimator")
    kappa_pos: float = param(0.2, "κ₊: correct rows get factor 1 + κ₊(ν̃ − 1) (favours exploratory successes)")
    kappa_neg: float = param(0.2, "κ₋: incorrect rows get factor 1 − κ₋(ν̃ − 1) (softens high-variance failures)")
    factor_min: float = param(0.5, "lower clip of the factor")
    factor_max: float = param(1.5, "upper clip of the factor")
    correct_at: float = param(1.0, "a row is 'correct' when its outcome score is >= this")
    ddof: int = param(0, "variance estimator of ν_i over a row's tokens: 0 = population, 1 = unbiased")
    eps: float = param(1e-8, "ν̃_i = ν_i/(mean ν + eps); a batch with mean ν = 0 has ν̃ ≡ 1 (factor 1)")

    def __post_init__(self) -> None:
        if not 0 < self.factor_min <= 1.0 <= self.factor_max:
            raise ValueError(f"cvpo: need 0 < factor_min <= 1 <= factor_max, got {self.factor_min}, {self.factor_max}")


def token_value_variance(values: Tensor, mask: Tensor, ddof: int = 0) -> Tensor:
    """(N,) ν_i: variance of V(s_{i,t}) over row i's trained tokens (0 when a row has <= ddof tokens)."""
    count = mask.sum(-1).to(values.dtype)  # (N,)
    mean = masked_sum(values, mask, dim=-1) / count.clamp(min=1)
    sq = masked_sum((values - mean.unsqueeze(-1)) ** 2, mask, dim=-1)
    return torch.where(count > ddof, sq / (count - ddof).clamp(min=1), torch.zeros_like(sq))


@register("advantage", "cvpo")
class CVPO(AdvantageEstimator):
    """Scale each row's critic advantage by its token value variance, differently for successes and failures.

    Paper: "CVPO: Curriculum-guided Value-variance Policy Optimization" (arXiv id unknown; seed
    abstract, docs/methods.md §2.14). RECONSTRUCTION throughout: the variance normaliser, the factor's
    form, its clip range and the sign convention per reward type. The question-level curriculum
    is the ``curriculum`` selector.

    Equation: ``ν_i = Var_{t∈mask_i} V(s_{i,t})``, ``ν̃_i = ν_i/(mean_batch ν + eps)`` (ν̃ ≡ 1 when the
    batch has no variance at all); correct rows ``f_i = 1 + κ₊(ν̃_i − 1)``, incorrect rows
    ``f_i = 1 − κ₋(ν̃_i − 1)``, ``f_i`` clipped to [factor_min, factor_max]; ``A′_{i,t} = f_i · A_{i,t}``
    with A from the parent estimator; returns are the parent's.

    Differs from la_gae (the parent):
      * one extra per-row factor from the critic's own uncertainty along the trajectory;
      * with κ₊ = κ₋ = 0, or no value variance in the batch, it is the parent exactly.

    Under data parallelism mean ν is the global batch's (``batch_stats`` summed over ranks).

    Shapes: values (N, T), rewards (N, K), mask (N, T) → advantages, returns (N, T).
    """

    Config = CVPOConfig
    mechanism_inputs = (("values",),)  # critic values V(s_t)
    paper = "CVPO: Curriculum-guided Value-variance Policy Optimization (arXiv id unknown; seed abstract)"
    needs_values = True

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.parent = build("advantage", self.config.parent, **self.config.parent_params)

    def batch_stats(self, inputs: AdvantageInputs) -> dict[str, Tensor]:
        """Σ ν_i over rows with a trained token, and their count: the global batch's mean ν."""
        if inputs.values is None:
            raise BatchError("cvpo needs critic values: AdvantageInputs.values (N, T) is None")
        rows = inputs.mask.any(-1)  # (N,)
        nu = token_value_variance(inputs.values.float(), inputs.mask, self.config.ddof)  # (N,)
        parent = {f"{PARENT}{k}": v for k, v in self.parent.batch_stats(inputs).items()}  # e.g. gae's whitening
        return {"nu_sum": nu[rows].sum(), "rows": rows.sum().float(), **parent}

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        cfg = self.config
        if inputs.values is None:
            raise BatchError("cvpo needs critic values: AdvantageInputs.values (N, T) is None")
        base = self.parent(_parent_inputs(inputs))
        mask = inputs.mask
        nu = token_value_variance(inputs.values.float(), mask, cfg.ddof)  # (N,)
        rows = mask.any(-1)  # (N,)
        stats = self.stats(inputs)
        mean_nu = stats["nu_sum"] / stats["rows"] if stats["rows"] > 0 else torch.tensor(0.0)  # global mean ν
        rel = nu / (mean_nu + cfg.eps) if mean_nu > 0 else torch.ones_like(nu)  # (N,) ν̃
        correct = sequence_scores(inputs) >= cfg.correct_at  # (N,)
        factor = torch.where(correct, 1.0 + cfg.kappa_pos * (rel - 1.0), 1.0 - cfg.kappa_neg * (rel - 1.0))
        clipped = (factor < cfg.factor_min) | (factor > cfg.factor_max)
        factor = factor.clamp(cfg.factor_min, cfg.factor_max)  # (N,)
        adv = base.advantages * factor.unsqueeze(-1).to(base.advantages.dtype)
        metrics = dict(base.metrics)
        metrics.update({"value_var_mean": mean_nu,
                        "cvpo_factor_mean": masked_mean(factor.unsqueeze(-1).expand_as(mask), mask),
                        "cvpo_factor_clipped": clipped[rows].float().mean() if rows.any() else torch.tensor(0.0)})
        return AdvantageOutput(adv, returns=base.returns, metrics={k: v.detach().float() for k, v in metrics.items()})


def _parent_inputs(inputs: AdvantageInputs) -> AdvantageInputs:
    """``inputs`` with the parent's share of the summed statistics (None when there are none)."""
    if inputs.global_stats is None:
        return inputs
    own = {k[len(PARENT):]: v for k, v in inputs.global_stats.items() if k.startswith(PARENT)}
    return dataclasses.replace(inputs, global_stats=own)
