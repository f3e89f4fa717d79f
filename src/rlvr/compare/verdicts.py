"""Verdicts computed from a family's results: gates first, then the claim's paired test.

A family is one comparison file's pre-registered claims (``rlvr.compare.claims``) with its
results.json records (and run_metrics.json rows, for mechanisms measured during training). For each
claim, in order:

1. **Gates.** A pre-registered ``not_testable`` reason; at least 2 paired seeds; the baseline's greedy
   gain over its warm start has a 95 % interval above 0 (claims against the baseline only); the
   mechanism fired; the claim's subset is not all zeros; the family has a positive control and it was
   detected on the claim's metric (paired t, worse than the baseline, p ≤ α/m, the strictest Holm step);
   a negative control, where there is one, did not differ (p > α). A failed gate gives *not testable
   here*, naming every failed gate.
2. **Test.** The claim's paired t p (``verdict_tests.claim_p``) joins Holm's correction across every
   claim of the findings (``holm``). Rejected: *reproduced* or *opposite* (the direction the mean
   points), provided the sign-flip test of the same hypothesis reaches the claim's Holm level; where it
   cannot (its smallest attainable p is above that level) the verdict says so; where it could and did
   not, *not reproduced (the sign-flip test disagrees)*. Not rejected: *not reproduced*.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.compare.claims import DEFAULT_MARGIN_FRACTION, Claim, Mechanism
from rlvr.compare.report import LOWER, flat_metrics
from rlvr.compare.verdict_tests import ALPHA, claim_p, holm, sign_flip_claim, t_interval

KINDS = ("reproduced", "opposite", "not reproduced", "not testable here")


@dataclass(frozen=True)
class Family:
    """One comparison file's claims and committed results."""

    name: str  # the file's stem: baselines, credit, ...
    baseline: str
    claims: tuple[Claim, ...]
    roles: dict[str, str]  # method -> role
    records: list[dict[str, Any]]  # results.json "runs"
    run_metrics: list[dict[str, Any]] = field(default_factory=list)  # run_metrics.json rows
    seeds: tuple[int, ...] = ()

    def values(self, method: str, metric: str) -> dict[Any, float]:
        """Per warm-start seed, the finished run's value of ``metric`` (absent where unknown)."""
        out = {}
        for rec in self.records:
            if rec["method"] == method and rec["status"] == "done":
                value = flat_metrics(rec).get(metric)
                if value is not None:
                    out[rec["seed"]] = float(value)
        return out

    def gains(self, method: str, metric: str) -> dict[Any, float]:
        """Per seed, ``metric`` after RL minus before it (greedy accuracy, a whole-set pass@k / maj@k, or a
        subset's or a training loop's own held-out measure, e.g. LURE's ``heldout/capture``)."""
        out = {}
        for rec in self.records:
            if rec["method"] != method or rec["status"] != "done":
                continue
            after, before = _before_after(rec, metric)
            if after is not None and before is not None:
                out[rec["seed"]] = float(after) - float(before)
        return out

    def window_values(self, method: str, metric: str, window: str) -> dict[Any, float]:
        rows = [r for r in self.run_metrics if r.get("method") == method and r.get("window") == window]
        return {int(s): float(v[metric]) for r in rows for s, v in r["seeds"].items() if metric in v}

    def with_role(self, role: str) -> list[str]:
        return [m for m, r in self.roles.items() if r == role]


def _before_after(rec: dict[str, Any], metric: str) -> tuple[Any, Any]:
    if metric == "accuracy_after":
        return rec.get("accuracy_after"), rec.get("accuracy_before")
    for key in ("pass_at_k", "maj_at_k", "subsets"):
        if metric in (rec.get(key) or {}):
            return rec[key][metric], (rec.get(f"{key}_before") or {}).get(metric)
    return None, None


def oriented(metric: str) -> float:
    """+1 where higher is better, −1 where lower is (rollouts, seconds, Brier, ECE)."""
    return -1.0 if metric in LOWER else 1.0


def paired_diffs(family: Family, claim: Claim) -> list[float]:
    """Oriented per-seed differences of the claim (positive = better for the method), in seed order."""
    if claim.versus == "warm_start":
        gains = family.gains(claim.method, claim.metric)
        return [gains[s] for s in sorted(gains)]
    ours, theirs = family.values(claim.method, claim.metric), family.values(family.baseline, claim.metric)
    sign = oriented(claim.metric)
    return [sign * (ours[s] - theirs[s]) for s in sorted(ours) if s in theirs]


def described_claims(family: Family) -> tuple[Claim, ...]:
    """The claims a family's power and control columns describe: those against the baseline, or, in a
    family with none (self_play: the baseline's own gain over its warm start), every claim."""
    return tuple(c for c in family.claims if c.versus == "baseline") or family.claims


def control_diffs(family: Family, control: str, metric: str) -> list[float]:
    ours, theirs = family.values(control, metric), family.values(family.baseline, metric)
    sign = oriented(metric)
    return [sign * (ours[s] - theirs[s]) for s in sorted(ours) if s in theirs]


def baseline_gain(family: Family) -> dict[str, Any]:
    """The baseline's greedy-accuracy gain over its warm start: mean and 95 % interval over seeds."""
    gains = list(family.gains(family.baseline, "accuracy_after").values())
    interval = t_interval(gains)
    return {"n": len(gains), "mean": sum(gains) / len(gains) if gains else None, "interval": interval}


def margin_of(family: Family, claim: Claim) -> float | None:
    """The claim's margin: as registered, else DEFAULT_MARGIN_FRACTION × the baseline's mean gain on the
    claim's metric (None where that gain is not positive or not measured)."""
    if claim.direction == "better":
        return None
    if claim.margin is not None:
        return claim.margin
    gains = list(family.gains(family.baseline, claim.metric).values())
    mean = sum(gains) / len(gains) if gains else None
    return DEFAULT_MARGIN_FRACTION * mean if mean is not None and mean > 0 else None


def mechanism_fired(family: Family, method: str, mech: Mechanism) -> tuple[bool | None, str]:
    """(fired, what was seen); fired is None where the metric is in none of the committed files."""
    get = (lambda m: family.window_values(m, mech.metric, mech.window)) if mech.window else \
        (lambda m: family.values(m, mech.metric))
    ours = get(method)
    if not ours:
        return None, f"{mech.metric} is not in the committed results"
    mean = sum(ours.values()) / len(ours)
    if mech.above is not None:
        return mean > mech.above, f"mean {mech.metric} {mean:.4g} (must be > {mech.above:g})"
    if mech.below is not None:
        return mean < mech.below, f"mean {mech.metric} {mean:.4g} (must be < {mech.below:g})"
    theirs = get(family.baseline)
    diffs = [ours[s] - theirs[s] for s in sorted(ours) if s in theirs]
    interval = t_interval(diffs)
    if interval is None:
        return None, f"{mech.metric}: fewer than 2 paired seeds"
    lo, hi = interval
    fired = hi < 0 if mech.vs_baseline == "lower" else lo > 0
    return fired, (f"{mech.metric} vs baseline {sum(diffs) / len(diffs):+.4g} [{lo:+.4g}, {hi:+.4g}] "
                   f"(must be {mech.vs_baseline})")


def subset_metric(claim: Claim) -> str:
    base = "greedy_accuracy" if claim.metric == "accuracy_after" else claim.metric
    return f"{base}/{claim.subset}"


def gates(family: Family, claim: Claim, n_claims: int, alpha: float = ALPHA) -> list[str]:
    """The failed gates of a claim, in order (empty: the claim can be tested here)."""
    failed: list[str] = []
    if claim.not_testable:
        failed.append(f"pre-registered: {claim.not_testable}")
    if len(paired_diffs(family, claim)) < 2:
        failed.append("fewer than 2 paired seeds")
    if claim.versus == "baseline":
        interval = baseline_gain(family)["interval"]
        if interval is None or interval[0] <= 0:
            failed.append("baseline gain: its 95 % interval does not exclude 0")
        if claim.direction != "better" and margin_of(family, claim) is None:
            failed.append("no margin: none registered and the baseline's gain on the metric is not positive")
    if claim.mechanism is not None:
        fired, seen = mechanism_fired(family, claim.method, claim.mechanism)
        if not fired:
            failed.append(f"mechanism {'not recorded' if fired is None else 'did not fire'}: {seen}")
    if claim.subset:
        key = subset_metric(claim)
        seen = [v for m in (claim.method, family.baseline) for v in family.values(m, key).values()]
        if not seen or not any(v > 0 for v in seen):
            failed.append(f"subset {claim.subset}: {key} is {'not recorded' if not seen else '0 in every run'}")
    failed += _control_gates(family, claim.metric, n_claims, alpha)
    return failed


def control_outcome(family: Family, control: str, role: str, metric: str, n_claims: int,
                    alpha: float = ALPHA) -> tuple[dict[str, Any], bool | None]:
    """A control's paired test against the baseline on ``metric`` and whether it did its job: a positive
    control is detected (worse, p ≤ α/m, the strictest Holm step), a negative one is not different
    (p > α). None where no seed is paired."""
    test = claim_p(control_diffs(family, control, metric), "better", None)
    if test["p"] is None:
        return test, None
    if role == "positive_control":
        return test, test["p"] <= alpha / max(1, n_claims) and test["mean"] < 0
    return test, test["p"] > alpha


def _control_gates(family: Family, metric: str, n_claims: int, alpha: float) -> list[str]:
    failed = []
    positives = family.with_role("positive_control")
    if not positives:
        failed.append("no positive control in the family (underpowered: detection is not shown)")
    for control in positives:
        if not control_outcome(family, control, "positive_control", metric, n_claims, alpha)[1]:
            failed.append(f"positive control {control} not detected on {metric}")
    for control in family.with_role("negative_control"):
        test, quiet = control_outcome(family, control, "negative_control", metric, n_claims, alpha)
        if quiet is False:
            failed.append(f"negative control {control} differed on {metric} (p = {test['p']:.3f})")
    return failed


def judge(families: list[Family], alpha: float = ALPHA) -> list[dict[str, Any]]:
    """Every claim's row: its test, Holm-corrected across all claims with a p, gates and verdict."""
    rows = []
    for family in families:
        for claim in family.claims:
            margin = margin_of(family, claim)
            g = paired_diffs(family, claim)
            rows.append({"family": family, "claim": claim, "margin": margin, "diffs": g,
                         "test": claim_p(g, claim.direction, margin),
                         "flip": sign_flip_claim(g, claim.direction, margin) if g else None})
    corrected = holm({i: r["test"]["p"] for i, r in enumerate(rows) if r["test"]["p"] is not None}, alpha)
    for i, row in enumerate(rows):
        row["holm"] = corrected.get(i)
        row["gates"] = gates(row["family"], row["claim"], len(corrected), alpha)
        row["verdict"], row["why"] = decide(row)
    return rows


def decide(row: dict[str, Any]) -> tuple[str, str]:
    """(verdict kind, the reason in one line) from a row's gates, Holm outcome and sign-flip test."""
    if row["gates"]:
        if row["holm"] is None:
            return "not testable here", "; ".join(row["gates"])
        alone, why = decide({**row, "gates": []})
        return "not testable here", "; ".join(row["gates"]) + f" (the paired test alone: {alone}, {why})"
    holm_row, flip = row["holm"], row["flip"]
    if not holm_row["rejected"]:
        return "not reproduced", f"Holm-adjusted p = {holm_row['p_holm']:.3g} > α"
    kind = row["test"]["if_rejected"]
    if flip["floor"] > holm_row["level"]:
        return kind, (f"t test only: with {row['test']['n']} seeds the sign-flip test cannot reach the Holm level "
                      f"{holm_row['level']:.3g} (its smallest p is {flip['floor']:.3g})")
    if flip["p"] > holm_row["level"]:
        return "not reproduced", (f"the sign-flip test disagrees (p = {flip['p']:.3g} > Holm level "
                                  f"{holm_row['level']:.3g})")
    return kind, f"Holm-adjusted p = {holm_row['p_holm']:.3g}; sign-flip p = {flip['p']:.3g} agrees"
