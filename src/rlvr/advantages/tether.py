"""TETHER: a baseline between the leave-one-out group mean and a (privileged) critic's value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput, sequence_scores
from rlvr.ops import group_stats, masked_sum
from rlvr.registry import param, register
from rlvr.types import AdvantageInputs, BatchError

WEIGHTS = ("explained_variance", "fixed")


@dataclass(frozen=True)
class TetherConfig:
    weight: str = param("explained_variance", "how w is set: 'explained_variance' = clip(1 − MSE_V/Var_grp, 0, 1) "
                                              "on the batch; 'fixed' = fixed_weight (ablations, tests)")
    fixed_weight: float = param(0.5, "w when weight = 'fixed' (0 = RLOO, 1 = pure critic advantage)")
    ema: bool = param(False, "smooth w over steps with an exponential moving average")
    ema_beta: float = param(0.9, "EMA factor: w ← β·w_prev + (1 − β)·w_batch (when ema is on)")
    eps: float = param(1e-8, "added to Var_grp in the MSE ratio (a batch whose group baseline is exact)")

    def __post_init__(self) -> None:
        if self.weight not in WEIGHTS:
            raise ValueError(f"tether: weight must be one of {WEIGHTS}, got '{self.weight}'")
        if not 0.0 <= self.fixed_weight <= 1.0 or not 0.0 <= self.ema_beta < 1.0:
            raise ValueError(f"tether: fixed_weight must be in [0, 1] and ema_beta in [0, 1), "
                             f"got {self.fixed_weight}, {self.ema_beta}")


@register("advantage", "tether")
class Tether(AdvantageEstimator):
    """Interpolate the baseline between the leave-one-out group mean and the critic, by critic accuracy.

    Paper: "Privileged Value Functions and TETHER" (arXiv id unknown; seed abstract, docs/methods.md §2.8).
    RECONSTRUCTION from the abstract: the weight rule (explained variance relative to the group
    baseline), the leave-one-out group baseline and the optional EMA of w.

    Equation, r_i the outcome score, γ = 1:
      ``b^grp_i = mean_{j≠i, j∈g(i)} r_j`` (0 for a group of one); ``b^V_{i,t} = V(s_{i,t}, z)``;
      ``w = clip(1 − MSE_V/(Var_grp + eps), 0, 1)``, ``MSE_V = mean_{i,t}(r_i − V_{i,t})²`` over trained
      tokens, ``Var_grp = mean_i (r_i − b^grp_i)²``;
      ``A_{i,t} = r_i − (w·b^V_{i,t} + (1 − w)·b^grp_i)``; value targets ``R_{i,t} = r_i``.

    Differs from rloo:
      * the baseline is per token and moves toward the critic as the critic becomes accurate;
      * w = 0 is RLOO exactly; w = 1 is the Monte-Carlo critic advantage r_i − V_{i,t};
      * the critic may read privileged inputs z (reference answer): still unbiased, since a
        baseline may depend on anything but the scored action.

    MSE_V and Var_grp are the global batch's under data parallelism (``batch_stats`` summed over ranks).

    Shapes: rewards (N, K) or token_rewards (N, T), values (N, T), mask (N, T), group_ids (N,)
    → advantages, returns (N, T).
    """

    Config = TetherConfig
    mechanism_inputs = (("values",),)  # critic values V(s_t)
    paper = "Privileged Value Functions and TETHER (arXiv id unknown; seed abstract)"
    needs_values = True

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.w_prev: float | None = None  # EMA state

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        if inputs.values is None:
            raise BatchError("tether needs critic values: AdvantageInputs.values (N, T) is None")
        mask = inputs.mask
        r = sequence_scores(inputs)  # (N,)
        values = inputs.values.to(r.dtype)  # (N, T)
        b_grp = _loo_baseline(r, inputs.group_ids)  # (N,)
        stats = self.stats(inputs)
        mse_v = stats["sq_err_sum"] / stats["tokens"].clamp(min=1)
        var_grp = stats["grp_sq_sum"] / stats["rows"].clamp(min=1)
        w = self._weight(mse_v, var_grp)
        baseline = w * values + (1.0 - w) * b_grp.unsqueeze(-1)  # (N, T)
        adv = (r.unsqueeze(-1) - baseline) * mask
        returns = r.unsqueeze(-1) * mask
        metrics = {"tether_w": torch.tensor(w), "tether_mse_v": mse_v, "tether_var_grp": var_grp}
        return AdvantageOutput(adv, returns=returns, metrics={k: v.detach().float() for k, v in metrics.items()})

    def batch_stats(self, inputs: AdvantageInputs) -> dict[str, Tensor]:
        """Sums of (r − V)² over trained tokens and of (r − b^grp)² over trained rows, with their counts:
        MSE_V and Var_grp of the global batch (also logged with a fixed w)."""
        mask = inputs.mask
        r = sequence_scores(inputs)  # (N,)
        rows = mask.any(-1)  # (N,)
        sq = (r - _loo_baseline(r, inputs.group_ids)) ** 2  # (N,)
        return {"sq_err_sum": masked_sum((r.unsqueeze(-1) - inputs.values.to(r.dtype)) ** 2, mask),
                "tokens": mask.sum().to(r.dtype), "grp_sq_sum": sq[rows].sum(), "rows": rows.sum().to(r.dtype)}

    def _weight(self, mse_v: Tensor, var_grp: Tensor) -> float:
        cfg = self.config
        if cfg.weight == "fixed":
            return cfg.fixed_weight
        w = float((1.0 - mse_v / (var_grp + cfg.eps)).clamp(0.0, 1.0))
        if cfg.ema:
            w = w if self.w_prev is None else cfg.ema_beta * self.w_prev + (1.0 - cfg.ema_beta) * w
            self.w_prev = w
        return w

    def state_dict(self) -> dict[str, Any]:
        return {"w_prev": self.w_prev}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.w_prev = state["w_prev"]


def _loo_baseline(r: Tensor, group_ids: Tensor) -> Tensor:
    """(N,) leave-one-out group mean of the scores r (N,); 0 for a group of one."""
    stats = group_stats(r, group_ids, ddof=1)
    n = stats.count  # (N,)
    return torch.where(n > 1, (stats.mean * n - r) / (n - 1).clamp(min=1), torch.zeros_like(r))
