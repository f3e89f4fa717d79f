"""Across-seed statistics for comparisons: mean, sample standard deviation and a Student-t interval.

No scipy: the two-sided 95 % quantiles t_{0.975, df} for df = 1..30 are tabulated below (three
decimals, as in printed tables); beyond df = 30 the normal quantile 1.96 is used, which is within
2 % of the exact t quantile there.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from typing import Any, Callable, Iterable

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


def sign_flip_p(diffs: list[float], exact_up_to: int = 40, samples: int = 20_000, seed: int = 0) -> float:
    """Two-sided paired sign-flip permutation p-value of the mean difference.

    Under the null "method and baseline are exchangeable within a seed", each per-seed difference is
    as likely to have either sign, so p = #{s ∈ {±1}ⁿ : |Σ sᵢdᵢ| ≥ |Σ dᵢ|} / 2ⁿ, counting the observed
    assignment (p ≥ 2/2ⁿ unless every difference is 0, where p = 1). Counted exactly for
    n ≤ ``exact_up_to`` (``count_at_least``); beyond that ``samples`` random flips (seeded) plus the
    observed one. Note the floor: with 5 seeds the smallest attainable p is 2/32 = 0.0625.
    """
    n = len(diffs)
    if n == 0:
        raise ValueError("sign_flip_p: no differences")
    observed = abs(sum(diffs))
    if n <= exact_up_to:
        return count_at_least(diffs, observed, two_sided=True) / 2 ** n
    return sampled_flip_p(diffs, lambda total: abs(total) >= observed - flip_tol(observed), samples, seed)


def flip_tol(observed: float) -> float:
    """The rounding slack of a sign-flip comparison of sums (a reordered sum can differ in its last bits)."""
    return 1e-9 * max(1.0, abs(observed))


def _signed_sums(xs: list[float]) -> list[float]:
    sums = [0.0]
    for x in xs:
        sums = [s + x for s in sums] + [s - x for s in sums]
    return sums


def count_at_least(xs: list[float], observed: float, two_sided: bool) -> int:
    """Sign assignments s ∈ {±1}ⁿ with Σ sᵢxᵢ ≥ observed (two-sided: |Σ sᵢxᵢ| ≥ observed ≥ 0),
    counted exactly by meeting in the middle: every signed sum of the first half is paired with the sorted signed
    sums of the second, so n values cost 2^(n/2) sums and bisections, not 2ⁿ."""
    half = len(xs) // 2
    left, right = _signed_sums(xs[:half]), sorted(_signed_sums(xs[half:]))
    tol = flip_tol(observed)
    if two_sided and observed <= tol:  # |sum| ≥ 0 holds for every assignment
        return 2 ** len(xs)
    count = 0
    for a in left:
        count += len(right) - bisect_left(right, observed - tol - a)
        if two_sided:
            count += bisect_right(right, -observed + tol - a)
    return count


def sampled_flip_p(xs: list[float], hit: Callable[[float], bool], samples: int, seed: int) -> float:
    """The share of ``samples`` random sign assignments (seeded) plus the observed one whose sum is a hit."""
    rng = random.Random(seed)
    hits = 1 + sum(hit(sum(x if rng.random() < 0.5 else -x for x in xs)) for _ in range(samples))
    return hits / (samples + 1)


def paired_difference(method: dict[Any, float | None], baseline: dict[Any, float | None],
                      higher_is_better: bool = True, tie_tol: float = 1e-12) -> dict[str, Any]:
    """Per-seed differences ``method[s] − baseline[s]`` over the seeds where both have a finite
    value: mean difference, its 95 % Student-t half-width (ddof = 1, as ``mean_ci``), the sign-flip
    permutation p-value, and win / tie / loss counts (a win is a better value for the method in the
    metric's direction; |difference| ≤ ``tie_tol`` is a tie). Fields are None where n is too small."""
    seeds = [s for s in method if s in baseline and _finite(method[s]) and _finite(baseline[s])]
    diffs = [float(method[s]) - float(baseline[s]) for s in seeds]
    stat = mean_ci(diffs)
    sign = 1.0 if higher_is_better else -1.0
    wins = sum(sign * d > tie_tol for d in diffs)
    losses = sum(sign * d < -tie_tol for d in diffs)
    return {"n": len(diffs), "seeds": seeds, "diffs": diffs, "mean": stat["mean"], "ci": stat["ci"],
            "std": stat["std"], "p": sign_flip_p(diffs) if diffs else None,
            "wins": wins, "ties": len(diffs) - wins - losses, "losses": losses}


def _finite(v: Any) -> bool:
    return v is not None and math.isfinite(float(v))


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar (sign) test of b problems only the method got right against c only the
    baseline got right: p = min(1, 2 · P(X ≤ min(b, c))), X ~ Binomial(b + c, ½); 1 when b + c = 0."""
    if b < 0 or c < 0:
        raise ValueError(f"mcnemar_p: counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n)


def problem_paired(ours: list[float], theirs: list[float]) -> dict[str, Any]:
    """Problem-by-problem differences of two runs scored on the same problems (one value per problem):
    mean difference, its evaluation-noise standard error sd(d)/√n (ddof = 1; the models held fixed, the
    problems a sample), b / c = problems where ours is higher / lower, and the exact sign test p."""
    if len(ours) != len(theirs) or not ours:
        raise ValueError(f"problem_paired: need equal, non-empty lists, got {len(ours)} and {len(theirs)}")
    d = [a - b for a, b in zip(ours, theirs)]
    n, mean = len(d), sum(d) / len(d)
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n) if n > 1 else None
    b, c = sum(x > 1e-12 for x in d), sum(x < -1e-12 for x in d)
    return {"n": n, "mean": mean, "se": se, "b": b, "c": c, "p": mcnemar_p(b, c)}
