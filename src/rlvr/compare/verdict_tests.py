"""The statistics a verdict rests on: the paired t test of a claim, its sign-flip counterpart, Holm's
correction across claims and the minimum detectable effect.

Differences are oriented so that positive means "better for the method" (lower-is-better metrics are
negated first). With g the oriented per-seed differences, s their sample SD (ddof = 1), n seeds and
δ the claim's margin:

- *better*: H0 g = 0, two-sided t = mean / (s/√n).
- *not_worse*: H0 g = −δ, two-sided t = (mean + δ) / (s/√n); rejected above −δ = not worse.
- *matches*: two one-sided tests (TOST), p = max(P(T ≥ (mean + δ)/se), P(T ≤ (mean − δ)/se)).

The sign-flip counterpart counts every sign assignment of the same shifted differences exactly up to
EXACT_UP_TO seeds (the sums of the two halves paired by bisection, so 27 seeds cost 2·2¹⁴ sums, not
2²⁷); beyond that it is estimated from 20,000 random flips and says so. Its smallest attainable p is
2/2ⁿ two-sided (1/2ⁿ one-sided), ties (zero differences) raising it further.
"""

from __future__ import annotations

import math
from typing import Any

from rlvr.compare.stats import count_at_least, flip_tol, sampled_flip_p, sign_flip_p
from rlvr.compare.tdist import t_ppf, t_sf

ALPHA = 0.05
POWER = 0.80


def claim_p(g: list[float], direction: str, margin: float | None) -> dict[str, Any]:
    """The paired t test of a claim on oriented differences ``g``: p, which way a rejection points
    ("reproduced" or "opposite"), mean, SD and n. With fewer than 2 seeds p is None."""
    n = len(g)
    if n < 2:
        return {"n": n, "p": None, "mean": g[0] if g else None, "sd": None, "if_rejected": None}
    mean = sum(g) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in g) / (n - 1))
    se, df, delta = sd / math.sqrt(n), n - 1, margin or 0.0
    if direction == "matches":
        p = max(_upper(mean + delta, se, df), _upper(delta - mean, se, df))
        return {"n": n, "p": p, "mean": mean, "sd": sd, "if_rejected": "reproduced"}
    shift = delta if direction == "not_worse" else 0.0
    p = min(1.0, 2.0 * _upper(abs(mean + shift), se, df))
    return {"n": n, "p": p, "mean": mean, "sd": sd, "if_rejected": "reproduced" if mean + shift > 0 else "opposite"}


def _upper(x: float, se: float, df: int) -> float:
    """P(T ≥ x / se): the one-sided p of H0 "the shifted mean is ≤ 0" (se = 0: 0 or 1 exactly)."""
    if se == 0.0:
        return 0.0 if x > 0 else 1.0
    return t_sf(x / se, df)


EXACT_UP_TO = 40  # seeds: two halves of at most 2^20 sign sums each, counted by bisection (stats.count_at_least)


def sign_flip_claim(g: list[float], direction: str, margin: float | None) -> dict[str, Any]:
    """The sign-flip p of the same hypothesis as ``claim_p``, the smallest p it could reach here and
    whether the p is exact (every sign assignment counted) or estimated from random flips."""
    delta = margin or 0.0
    nonzero = lambda xs: sum(abs(x) > 1e-12 for x in xs)  # noqa: E731 - a zero difference flips to itself
    exact = len(g) <= EXACT_UP_TO
    if direction == "matches":
        lo, hi = [x + delta for x in g], [delta - x for x in g]
        return {"p": max(one_sided_flip_p(lo), one_sided_flip_p(hi)),
                "floor": max(0.5 ** nonzero(lo), 0.5 ** nonzero(hi)), "exact": exact}
    shifted = [x + delta for x in g] if direction == "not_worse" else list(g)
    return {"p": two_sided_flip_p(shifted), "floor": min(1.0, 2.0 * 0.5 ** nonzero(shifted)), "exact": exact}


def two_sided_flip_p(xs: list[float], samples: int = 20_000, seed: int = 0) -> float:
    """#{s ∈ {±1}ⁿ : |Σ sᵢxᵢ| ≥ |Σ xᵢ|} / 2ⁿ, exact up to EXACT_UP_TO values, else estimated."""
    return sign_flip_p(xs, exact_up_to=EXACT_UP_TO, samples=samples, seed=seed)


def one_sided_flip_p(xs: list[float], samples: int = 20_000, seed: int = 0) -> float:
    """P(Σ sᵢxᵢ ≥ Σ xᵢ) over random signs s ∈ {±1}ⁿ: the one-sided sign-flip p of "the mean is ≤ 0",
    exact up to EXACT_UP_TO values, else estimated."""
    observed = sum(xs)
    if len(xs) <= EXACT_UP_TO:
        return count_at_least(xs, observed, two_sided=False) / 2 ** len(xs)
    return sampled_flip_p(xs, lambda total: total >= observed - flip_tol(observed), samples, seed)


def holm(pvalues: dict[Any, float], alpha: float = ALPHA) -> dict[Any, dict[str, float]]:
    """Holm's step-down correction: per key, the adjusted p (monotone, ≤ 1), the level its raw p had to
    reach (α / (m − rank)) and whether it is rejected (every smaller p rejected too)."""
    order = sorted(pvalues, key=lambda k: pvalues[k])
    m, running, still = len(order), 0.0, True
    out: dict[Any, dict[str, float]] = {}
    for rank, key in enumerate(order):
        level = alpha / (m - rank)
        running = max(running, min(1.0, (m - rank) * pvalues[key]))
        still = still and pvalues[key] <= level
        out[key] = {"p_holm": running, "level": level, "rejected": still, "m": m}
    return out


def mde(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """Minimum detectable effect of a paired two-sided t test: (t_{1−α/2, n−1} + t_{power, n−1})·sd/√n,
    the shift the test detects with probability ≈ ``power`` at level ``alpha`` (None for n < 2)."""
    if n < 2 or sd is None:
        return None
    return (t_ppf(1.0 - alpha / 2.0, n - 1) + t_ppf(power, n - 1)) * sd / math.sqrt(n)


def seeds_for(sd: float, effect: float, alpha: float = ALPHA, power: float = POWER, most: int = 1000) -> int | None:
    """The fewest seeds whose MDE is ≤ ``effect`` (None beyond ``most``)."""
    for n in range(2, most + 1):
        if mde(sd, n, alpha, power) <= effect:
            return n
    return None


def pooled_sd(groups: list[list[float]]) -> float | None:
    """√(Σ (nᵢ − 1)·sᵢ² / Σ (nᵢ − 1)) over groups of paired differences with at least 2 values."""
    num = den = 0.0
    for xs in groups:
        if len(xs) < 2:
            continue
        mean = sum(xs) / len(xs)
        num += sum((x - mean) ** 2 for x in xs)
        den += len(xs) - 1
    return math.sqrt(num / den) if den else None


def t_interval(xs: list[float]) -> tuple[float, float] | None:
    """mean ∓ t_{0.975, n−1}·s/√n (None for n < 2)."""
    n = len(xs)
    if n < 2:
        return None
    mean = sum(xs) / n
    half = t_ppf(0.975, n - 1) * math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) / math.sqrt(n)
    return mean - half, mean + half
