"""The statistics a verdict rests on: the paired t test of a claim, its sign-flip counterpart, Holm's
correction across claims and the minimum detectable effect.

Differences are oriented so that positive means "better for the method" (lower-is-better metrics are
negated first). With g the oriented per-seed differences, s their sample SD (ddof = 1), n seeds and
δ the claim's margin:

- *better*: H0 g = 0, two-sided t = mean / (s/√n).
- *not_worse*: H0 g = −δ, two-sided t = (mean + δ) / (s/√n); rejected above −δ = not worse.
- *matches*: two one-sided tests (TOST), p = max(P(T ≥ (mean + δ)/se), P(T ≤ (mean − δ)/se)).

The sign-flip counterpart enumerates every sign assignment of the same shifted differences (exact up
to 16 seeds); its smallest attainable p is 2/2ⁿ two-sided (1/2ⁿ one-sided), ties (zero differences)
raising it further.
"""

from __future__ import annotations

import math
import random
from typing import Any

from rlvr.compare.stats import sign_flip_p
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


def sign_flip_claim(g: list[float], direction: str, margin: float | None) -> dict[str, float]:
    """The sign-flip p of the same hypothesis as ``claim_p`` and the smallest p it could reach here."""
    delta = margin or 0.0
    nonzero = lambda xs: sum(abs(x) > 1e-12 for x in xs)  # noqa: E731 - a zero difference flips to itself
    if direction == "matches":
        lo, hi = [x + delta for x in g], [delta - x for x in g]
        return {"p": max(one_sided_flip_p(lo), one_sided_flip_p(hi)),
                "floor": max(0.5 ** nonzero(lo), 0.5 ** nonzero(hi))}
    shifted = [x + delta for x in g] if direction == "not_worse" else list(g)
    return {"p": sign_flip_p(shifted), "floor": min(1.0, 2.0 * 0.5 ** nonzero(shifted))}


def one_sided_flip_p(xs: list[float], exact_up_to: int = 16, samples: int = 20_000, seed: int = 0) -> float:
    """P(Σ sᵢxᵢ ≥ Σ xᵢ) over random signs s ∈ {±1}ⁿ: the one-sided sign-flip p of "the mean is ≤ 0"."""
    observed, n = sum(xs), len(xs)
    tol = 1e-12 * max(1.0, abs(observed))
    if n <= exact_up_to:
        hits = sum(sum(-x if mask >> i & 1 else x for i, x in enumerate(xs)) >= observed - tol
                   for mask in range(2 ** n))
        return hits / 2 ** n
    rng = random.Random(seed)
    hits = 1 + sum(sum(x if rng.random() < 0.5 else -x for x in xs) >= observed - tol for _ in range(samples))
    return hits / (samples + 1)


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
