"""Across-seed statistics for comparisons: mean, sample standard deviation and a Student-t interval.

No scipy: the two-sided 95 % quantiles t_{0.975, df} for df = 1..30 are tabulated below (three
decimals, as in printed tables); beyond df = 30 the normal quantile 1.96 is used, which is within
2 % of the exact t quantile there.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

# t_{0.975, df}: the quantile with 2.5 % in the upper tail, so mean ± t·s/√n is a 95 % interval.
T_975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
    10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
    18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
    26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042,
}
Z_975 = 1.96


def t_quantile(df: int) -> float:
    """Two-sided 95 % Student-t quantile for ``df`` ≥ 1 degrees of freedom (1.96 beyond 30)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return T_975.get(df, Z_975)


def mean_ci(values: Iterable[float], level: float = 0.95, ddof: int = 1) -> dict[str, Any]:
    """Mean, sample standard deviation and 95 % confidence half-width of ``values``.

    std = sqrt(Σ (x − mean)² / (n − ddof)) with ddof = 1 (the unbiased sample variance);
    ci = t_{0.975, n−1} · std / √n, the half-width of the Student-t interval for the mean.
    Non-finite values and None are dropped (a failed run has no number). With n = 0 every field
    but n is None; with n = 1 the mean is the value and std and ci are None (no spread to measure).
    Only ``level`` = 0.95 is supported (the quantile table is for that level).
    """
    if level != 0.95:
        raise ValueError(f"only level=0.95 is supported (tabulated t quantiles), got {level}")
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        return {"mean": None, "ci": None, "n": 0, "std": None}
    mean = sum(xs) / n
    if n == 1:
        return {"mean": mean, "ci": None, "n": 1, "std": None}
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - ddof))
    return {"mean": mean, "ci": t_quantile(n - 1) * std / math.sqrt(n), "n": n, "std": std}
