"""Calibration of stated confidences: Brier score and expected calibration error (ECE)."""

from __future__ import annotations

from typing import Sequence

from rlvr.rewards.answer import parse_confidence
from rlvr.types import Score


def brier_score(confidence: Sequence[float], correct: Sequence[float]) -> float:
    """Mean squared gap ``(1/n) Σ (c_i − y_i)²`` between confidence c_i ∈ [0, 1] and outcome y_i ∈ {0, 1}."""
    _check(confidence, correct)
    return sum((float(c) - float(y)) ** 2 for c, y in zip(confidence, correct)) / len(confidence)


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[float], *, num_bins: int) -> float:
    """ECE with ``num_bins`` equal-width bins over [0, 1]: ``Σ_b (n_b / n)·|acc_b − conf_b|``.

    Sample i falls in bin ``min(⌊c_i · num_bins⌋, num_bins − 1)`` (so c = 1 is in the last bin);
    ``acc_b`` and ``conf_b`` are the mean outcome and mean confidence of bin b; empty bins add 0.
    """
    _check(confidence, correct)
    if num_bins < 1:
        raise ValueError(f"expected_calibration_error: num_bins must be >= 1, got {num_bins}")
    sums = [[0, 0.0, 0.0] for _ in range(num_bins)]  # per bin: count, Σ c, Σ y
    for c, y in zip(confidence, correct):
        b = min(int(float(c) * num_bins), num_bins - 1)
        sums[b][0] += 1
        sums[b][1] += float(c)
        sums[b][2] += float(y)
    n = len(confidence)
    return sum(abs(sy - sc) / n for count, sc, sy in sums if count)  # (n_b/n)·|Σy/n_b − Σc/n_b|


def calibration_metrics(texts: Sequence[str], scores: Sequence[Score], *, num_bins: int = 10) -> dict[str, float]:
    """Brier and ECE over the completions that state a confidence (``confidence: 0.8``); {} when none does.

    Keys: ``calibration/stated_frac`` (over all completions), ``calibration/confidence_mean``,
    ``calibration/accuracy`` (of the stating completions), ``calibration/brier``,
    ``calibration/ece`` (``num_bins`` bins, also reported as ``calibration/ece_bins``).
    """
    if len(texts) != len(scores):
        raise ValueError(f"calibration_metrics: {len(texts)} texts but {len(scores)} scores")
    pairs = [(c, float(s.value >= 0.5)) for t, s in zip(texts, scores) if (c := parse_confidence(t)) is not None]
    if not pairs:
        return {}
    conf, correct = [c for c, _ in pairs], [y for _, y in pairs]
    return {"calibration/stated_frac": len(pairs) / len(texts),
            "calibration/confidence_mean": sum(conf) / len(conf),
            "calibration/accuracy": sum(correct) / len(correct),
            "calibration/brier": brier_score(conf, correct),
            "calibration/ece": expected_calibration_error(conf, correct, num_bins=num_bins),
            "calibration/ece_bins": float(num_bins)}


def _check(confidence: Sequence[float], correct: Sequence[float]) -> None:
    if len(confidence) != len(correct) or not confidence:
        raise ValueError(f"calibration: need equally many (>= 1) confidences and outcomes, got "
                         f"{len(confidence)} and {len(correct)}")
    if any(not 0.0 <= float(c) <= 1.0 for c in confidence):
        raise ValueError("calibration: confidences must lie in [0, 1]")
