"""Cliff: token advantages that drop from positive to negative at the first wrong step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from rlvr.advantages.base import AdvantageEstimator, AdvantageOutput
from rlvr.advantages.grpo import GRPO, GRPOConfig
from rlvr.registry import param, register
from rlvr.types import AdvantageInputs, BatchError

MODES = ("group", "replace")


@dataclass(frozen=True)
class CliffConfig(GRPOConfig):
    mode: str = param("group", "RECONSTRUCTION, combination rule: 'group' = |Â_i|·(+a_pos prefix, −a_neg "
                               "suffix) where a mistake was found, plain GRPO Â_i elsewhere; 'replace' = "
                               "+a_pos / −a_neg for every row, ignoring the outcome reward")
    a_pos: float = param(1.0, "RECONSTRUCTION, magnitude: advantage (or |Â| multiplier) before the first mistake")
    a_neg: float = param(1.0, "RECONSTRUCTION, magnitude: penalty (or |Â| multiplier) from the first mistake on")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode not in MODES:
            raise ValueError(f"cliff: mode must be one of {MODES}, got '{self.mode}'")
        if self.a_pos < 0 or self.a_neg < 0:
            raise ValueError(f"cliff: a_pos and a_neg must be >= 0, got {self.a_pos}, {self.a_neg}")


@register("advantage", "cliff")
class Cliff(AdvantageEstimator):
    """First-mistake token advantages: positive on the correct prefix, negative from the mistake on.

    Paper: "Cliff: first-mistake reward shaping" (arXiv id unknown; seed abstract, docs/methods.md §2.3).
    This is a RECONSTRUCTION from the abstract; the reconstructed parts are
      * the form: a step function in the token index, cut at the first token ``m_i`` of the first
        wrong step (given by a teacher, ``inputs.first_mistake``; -1 = no mistake found);
      * the magnitudes ``a_pos`` and ``a_neg`` (default 1, 1);
      * the combination rule ``mode`` with the GRPO advantage Â_i (default 'group').

    Equation (trained tokens only; ``m_i = -1`` means ∅, i.e. ``m_i = ∞``):
      * cliff sign ``c[i,t] = +a_pos if t < m_i else −a_neg``;
      * ``mode='replace'``: ``adv[i,t] = c[i,t]`` for every row (a row with ∅ is all +a_pos,
        whatever its reward — the teacher's verdict replaces the outcome);
      * ``mode='group'``: ``adv[i,t] = |Â_i|·c[i,t]`` where a mistake was found, ``Â_i`` where not;
        with a_pos = a_neg = 1 this is the docs/methods.md §2.3 ``|Â_i|·(±1)``.

    Differs from grpo:
      * where a teacher located a first mistake, the row's advantage changes sign at that token
        instead of being constant along the sequence;
      * needs ``first_mistake`` (``needs_first_mistake = True``: the trainer runs a teacher);
      * with no mistake anywhere and ``mode='group'`` it is grpo exactly (all grpo settings apply).

    Shapes: rewards (N, K), mask (N, T), group_ids (N,), first_mistake (N,) long → advantages (N, T).
    """

    Config = CliffConfig
    mechanism_inputs = (("first_mistake",),)  # a teacher's first wrong step per row
    paper = "Cliff: first-mistake reward shaping (arXiv id unknown; seed abstract)"
    needs_first_mistake: ClassVar[bool] = True

    def __call__(self, inputs: AdvantageInputs) -> AdvantageOutput:
        cfg = self.config
        if inputs.first_mistake is None:
            raise BatchError("cliff needs AdvantageInputs.first_mistake (N,) from a teacher "
                             "(algorithm.teacher: oracle | llm); got None")
        mask = inputs.mask  # (N, T)
        first = inputs.first_mistake.to(mask.device).long()  # (N,)
        found = first >= 0  # (N,)
        positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)  # (N, T)
        before = ~found[:, None] | (positions < first[:, None])  # (N, T) True on the correct prefix
        cliff = torch.full(mask.shape, float(cfg.a_pos), device=mask.device)  # (N, T)
        cliff = cliff.masked_fill(~before, -float(cfg.a_neg))
        metrics = _metrics(first, found, mask)
        if cfg.mode == "replace":
            return AdvantageOutput(cliff * mask, metrics=metrics)
        grpo = self._grpo()(inputs)
        base = grpo.advantages  # (N, T) Â_i on trained tokens
        adv = torch.where(found[:, None], base.abs() * cliff, base) * mask  # (N, T)
        return AdvantageOutput(adv, metrics={**grpo.metrics, **metrics})

    def batch_stats(self, inputs: AdvantageInputs) -> dict[str, Tensor]:
        """The inner GRPO's (its batch std with ``scale='batch'``); none in ``replace`` mode."""
        return {} if self.config.mode == "replace" else self._grpo().batch_stats(inputs)

    def _grpo(self) -> GRPO:
        cfg = self.config
        return GRPO(GRPOConfig(scale=cfg.scale, ddof=cfg.ddof, eps=cfg.eps, singleton=cfg.singleton,
                               std_power=cfg.std_power))


def _metrics(first: Tensor, found: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Fraction of rows with a mistake, and where it falls (trained tokens before it / trained tokens)."""
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)  # (N, T)
    prefix = (mask & (positions < first[:, None])).sum(-1).float()  # (N,)
    length = mask.sum(-1).float().clamp(min=1.0)  # (N,)
    pos = (prefix / length)[found].mean() if found.any() else torch.tensor(0.0)
    return {"mistake_frac": found.float().mean(), "mistake_pos_frac": pos}
