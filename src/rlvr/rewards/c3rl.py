"""C3RL: a reward for being right, saying how sure you are, and not hedging on items the base model solves."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from rlvr.registry import param, register
from rlvr.rewards.answer import parse_confidence
from rlvr.rewards.base import RewardShaper
from rlvr.types import BatchError, Rollouts, add_metrics

CALIBRATIONS = ("binary", "continuous")
MISSING = ("mismatch", "skip")
REF_SOURCES = ("tag", "group")


@dataclass(frozen=True)
class C3RLConfig:
    correct_weight: float = param(0.9, "weight of 1[correct] in R_correctness (SECONDARY: 0.9)")
    format_weight: float = param(0.1, "weight of the format term in R_correctness (SECONDARY: 0.1); format = "
                                      "an answer was parsed and a confidence stated")
    beta_cal: float = param(0.1, "calibration reward size beta (RECONSTRUCTION)")
    alpha_ref: float = param(0.1, "reference-accuracy reward size alpha (RECONSTRUCTION)")
    ref_tau: float = param(0.5, "an item is hard when acc_ref < ref_tau, easy otherwise (RECONSTRUCTION)")
    calibration: str = param("binary", "binary: +beta if (c >= match_threshold) == correct else -beta; "
                                       "continuous: beta*(1 - 2|c - 1[correct]|) (RECONSTRUCTION)")
    match_threshold: float = param(0.5, "binary calibration: confidence at or above it claims 'correct'")
    missing: str = param("mismatch", "a completion stating no confidence: mismatch (R_cal = -beta, no format "
                                     "credit) | skip (R_cal = 0, no format credit)")
    ref_source: str = param("tag", "acc_ref: tag (problem.meta[ref_key], the base model's precomputed accuracy; "
                                   "rows without it get R_ref = 0) | group (the group's mean correctness)")
    ref_key: str = param("ref_accuracy", "problem.meta key of the reference-accuracy tag")

    def __post_init__(self) -> None:
        for name, value, valid in (("calibration", self.calibration, CALIBRATIONS), ("missing", self.missing, MISSING),
                                   ("ref_source", self.ref_source, REF_SOURCES)):
            if value not in valid:
                raise ValueError(f"c3rl: {name} must be one of {valid}, got '{value}'")
        if not 0.0 <= self.match_threshold <= 1.0:
            raise ValueError(f"c3rl: match_threshold must be in [0, 1], got {self.match_threshold}")


def c3rl_reward(correct: Tensor, confidence: Tensor, stated: Tensor, answered: Tensor, acc_ref: Tensor,
                has_ref: Tensor, cfg: C3RLConfig) -> dict[str, Tensor]:
    """The three C3RL terms and their sum, all (N,).

    ``correct`` (N,) bool; ``confidence`` (N,) float in [0, 1] (ignored where ``stated`` is False);
    ``stated``, ``answered``, ``has_ref`` (N,) bool; ``acc_ref`` (N,) float (ignored where
    ``has_ref`` is False). Returns ``{"total", "correctness", "calibration", "reference"}``.
    """
    y = correct.float()  # (N,)
    fmt = (stated & answered).float()
    r_corr = cfg.correct_weight * y + cfg.format_weight * fmt
    if cfg.calibration == "binary":
        match = (confidence >= cfg.match_threshold) == correct
        r_cal = torch.where(match, cfg.beta_cal, -cfg.beta_cal)
    else:
        r_cal = cfg.beta_cal * (1.0 - 2.0 * (confidence - y).abs())
    r_cal = torch.where(stated, r_cal, -cfg.beta_cal if cfg.missing == "mismatch" else 0.0).float()
    hard = acc_ref < cfg.ref_tau
    gain = correct & hard & has_ref  # solved an item the base model mostly fails
    regression = ~correct & ~hard & has_ref  # failed an item the base model mostly solves
    r_ref = cfg.alpha_ref * (gain.float() - regression.float())
    return {"total": r_corr + r_cal + r_ref, "correctness": r_corr, "calibration": r_cal, "reference": r_ref}


@register("shaper", "c3rl")
class C3RL(RewardShaper):
    """C3RL reward: correctness + calibration of the stated confidence + reference-accuracy term.

    Paper: C3RL, correctness and confidence calibration RL (arXiv:2607.01612), docs/methods.md §2.28.
    The 0.9/0.1 correctness weights are SECONDARY; the calibration and reference terms are a
    RECONSTRUCTION from the abstract (every choice is a config option with the docs/methods.md §2.28 default).

    Equation: ``R = 0.9·1[correct] + 0.1·format + R_cal + R_ref`` with
    ``R_cal = +β if (c ≥ 0.5) == correct else −β`` (or ``β(1 − 2|c − 1[correct]|)``) and
    ``R_ref = +α`` if correct and ``acc_ref < τ``, ``−α`` if wrong and ``acc_ref ≥ τ``, else 0.
    The confidence c is parsed from the completion text (``... answer: 17 confidence: 0.8``,
    :func:`rlvr.rewards.answer.parse_confidence`); ``correct`` is ``rewards[:, 0] ≥ 0.5`` (the verdict).

    Differs from the raw verifier reward:
      * objective 0 becomes R (named ``c3rl``); the verdict is kept as a last objective ``correct``;
      * a completion stating no confidence gets no format credit and, by default, ``R_cal = −β``.

    Shapes: texts (N,), rewards (N, K) → rewards (N, K + 1) and ``row_stats["stated_confidence"]`` (N,)
    (NaN = none stated). Metrics (``meta["shaper_metrics"]``):
    ``reward/c3rl_mean``, ``reward/c3rl_correct``, ``reward/c3rl_stated_frac``,
    ``reward/c3rl_calibration``, ``reward/c3rl_reference`` and, when any row states one,
    ``reward/c3rl_confidence`` and ``reward/c3rl_brier``.
    """

    Config = C3RLConfig
    paper = "C3RL: correctness and confidence calibration RL (arXiv:2607.01612)"

    def __call__(self, rollouts: Rollouts) -> Rollouts:
        n = rollouts.num_rows
        if rollouts.rewards is None or len(rollouts.texts) != n:
            raise BatchError(f"c3rl: needs rewards (N, K) and {n} texts, got {len(rollouts.texts)} texts")
        parsed = [parse_confidence(t) for t in rollouts.texts]
        stated = torch.tensor([c is not None for c in parsed])  # (N,)
        confidence = torch.tensor([0.0 if c is None else c for c in parsed])  # (N,)
        answers = rollouts.parsed  # (N,) or [] before verification
        answered = torch.tensor([a is not None for a in answers]) if answers and len(answers) == n \
            else torch.ones(n, dtype=torch.bool)
        verdict = rollouts.rewards[:, 0].float()  # (N,)
        correct = (verdict >= 0.5).cpu()  # the text-derived terms are built on the CPU
        acc_ref, has_ref = self._reference(rollouts, correct)
        terms = c3rl_reward(correct, confidence, stated, answered, acc_ref, has_ref, self.config)
        rewards = torch.cat([rollouts.rewards.clone(), verdict[:, None]], dim=1)  # (N, K + 1)
        rewards[:, 0] = terms["total"].to(rewards.device)
        names = list(rollouts.reward_names) or ["correct"]
        names = ["c3rl", *names[1:], "correct"]
        meta = add_metrics(rollouts.meta, _metrics(terms, correct, confidence, stated))
        stated_conf = torch.tensor([float("nan") if c is None else c for c in parsed])  # (N,) NaN = none stated
        return replace(rollouts, rewards=rewards, reward_names=names, meta=meta,
                       row_stats={**rollouts.row_stats, "stated_confidence": stated_conf})

    def _reference(self, rollouts: Rollouts, correct: Tensor) -> tuple[Tensor, Tensor]:
        """(N,) acc_ref and (N,) bool whether the row has one."""
        n = rollouts.num_rows
        if self.config.ref_source == "group":
            _, inverse = torch.unique(rollouts.group_ids, return_inverse=True)
            sums = torch.zeros(int(inverse.max()) + 1).index_add_(0, inverse, correct.float())
            counts = torch.bincount(inverse).float()
            return (sums / counts)[inverse], torch.ones(n, dtype=torch.bool)
        tags = [p.meta.get(self.config.ref_key) for p in rollouts.problems]
        has = torch.tensor([t is not None for t in tags])
        return torch.tensor([0.0 if t is None else float(t) for t in tags]), has


def _metrics(terms: dict[str, Tensor], correct: Tensor, confidence: Tensor, stated: Tensor) -> dict[str, float]:
    out = {"reward/c3rl_mean": terms["total"].mean().item(), "reward/c3rl_correct": correct.float().mean().item(),
           "reward/c3rl_stated_frac": stated.float().mean().item(),
           "reward/c3rl_calibration": terms["calibration"].mean().item(),
           "reward/c3rl_calibration_std": terms["calibration"].float().std(unbiased=False).item(),
           "reward/c3rl_reference": terms["reference"].mean().item()}
    if stated.any():
        c, y = confidence[stated], correct[stated].float()
        out.update({"reward/c3rl_confidence": c.mean().item(), "reward/c3rl_brier": ((c - y) ** 2).mean().item()})
    return out
