"""Verdicts computed from a family's results: gates first, then the claim's tests against each baseline arm.

A family is one comparison file's pre-registered claims (``rlvr.compare.claims``) with its
results.json records (and run_metrics.json rows, for mechanisms measured during training). For each
claim, in order:

1. **Gates.** A pre-registered ``not_testable`` reason; at least 2 paired seeds; at least ``min_updates``
   optimizer updates (default DEFAULT_MIN_UPDATES_FRACTION of the baseline's fewest); for a claim against
   the baseline, the method's own change from its start has a 95 % interval that excludes 0; the
   baseline's greedy gain has a 95 % interval above 0 (claims against the baseline only); the mechanism
   reached its threshold; the claim's subset is not all zeros; the family has a positive control and it
   was detected on the claim's metric (paired t, worse than the baseline, p ≤ α/m, the strictest Holm
   step). A failed gate gives *not testable here*, naming every failed gate.
2. **Tests.** The claim's paired t p (``verdict_tests.claim_p``) and its exact sign-flip p are each
   Holm-corrected (``holm``) across the claims of the committed Holm family (``check_holm_family``).
   Against one baseline arm: a t rejection gives *reproduced* or *opposite* (the way the mean points) if
   the sign-flip test rejects too, with the qualifier *t test only* where its smallest p cannot reach its
   Holm level; otherwise *ruled out* where the 95 % interval excludes the effect of interest
   (``effect_of_interest``), else *inconclusive*. The claim is judged the same way against the family's
   negative controls (the baseline with another RL seed, at the same Holm levels); the verdict must be the
   same against every arm, else *inconclusive*.

The fresh-seed confirmation (``rlvr findings``) judges its re-run claims with these same functions. A claim
its Holm family lists whose family has not run yet is *pending*: it enters Holm's correction with p = 1
(``PENDING_P``), so m stays the listed count and every tested claim's level is α/(m − rank) over all the
listed claims. Holm's procedure is monotone in each p-value, so a rejection by both tests made while claims
are pending stands whatever p they later get (levels only loosen as ranks grow); a *t test only* one, or a
non-rejection, may still change. A confirmatory verdict confirms the exploratory one only when the two are
the same kind (``confirms``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlvr.compare.claims import DEFAULT_MARGIN_FRACTION, DEFAULT_MIN_UPDATES_FRACTION, Claim, Mechanism
from rlvr.compare.report import LOWER, flat_metrics
from rlvr.compare.verdict_tests import ALPHA, claim_p, holm, sign_flip_claim, t_interval
from rlvr.train.config import ConfigError

KINDS = ("reproduced", "opposite", "ruled out", "inconclusive", "not testable here")
DECIDED = ("reproduced", "opposite", "ruled out")  # the verdicts a fresh-seed confirmation re-runs
T_ONLY = "t test only"  # the qualifier of a rejection the sign-flip test could not reach
PENDING_P = 1.0  # the p a pending claim (listed, its family not run yet) enters Holm's correction with


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


def pair_diffs(family: Family, ours: str, theirs: str, metric: str) -> list[float]:
    """Oriented per-seed differences ``ours`` − ``theirs`` on ``metric`` (positive = better for ``ours``), over
    the seeds where both finished, in seed order."""
    mine, other = family.values(ours, metric), family.values(theirs, metric)
    sign = oriented(metric)
    return [sign * (mine[s] - other[s]) for s in sorted(mine) if s in other]


def paired_diffs(family: Family, claim: Claim) -> list[float]:
    """Oriented per-seed differences of the claim (positive = better for the method), in seed order."""
    if claim.versus == "warm_start":
        gains = family.gains(claim.method, claim.metric)
        return [gains[s] for s in sorted(gains)]
    return pair_diffs(family, claim.method, family.baseline, claim.metric)


def described_claims(family: Family) -> tuple[Claim, ...]:
    """The claims a family's power and control columns describe: those against the baseline, or, in a
    family with none (self_play: the baseline's own gain over its warm start), every claim."""
    return tuple(c for c in family.claims if c.versus == "baseline") or family.claims


def control_diffs(family: Family, control: str, metric: str) -> list[float]:
    return pair_diffs(family, control, family.baseline, metric)


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


def updates(family: Family, method: str) -> list[int]:
    """The optimizer updates (results.json ``steps``) of each finished run of ``method``."""
    return [int(r["steps"]) for r in family.records
            if r["method"] == method and r["status"] == "done" and r.get("steps") is not None]


def min_updates_of(family: Family, claim: Claim) -> int | None:
    """The claim's pre-registered ``min_updates``, else DEFAULT_MIN_UPDATES_FRACTION × the baseline's fewest
    updates (rounded up); None where neither is known."""
    if claim.min_updates is not None:
        return claim.min_updates
    base = updates(family, family.baseline)
    return math.ceil(DEFAULT_MIN_UPDATES_FRACTION * min(base)) if base else None


def span(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def own_change(family: Family, claim: Claim) -> tuple[str, list[float]]:
    """The method's own change from its starting point, per seed: on the claim's metric where its value
    before RL is recorded, else greedy accuracy."""
    metric = claim.metric if family.gains(claim.method, claim.metric) else "accuracy_after"
    gains = family.gains(claim.method, metric)
    return metric, [gains[s] for s in sorted(gains)]


def moved_gates(family: Family, claim: Claim) -> list[str]:
    """The moved-from-start gate: enough optimizer updates, and (claims against the baseline) an own change
    whose 95 % interval excludes 0; otherwise the paired difference reads the baseline's gain backwards."""
    failed = []
    floor, made = min_updates_of(family, claim), updates(family, claim.method)
    if floor is not None and made and min(made) < floor:
        where = "" if claim.min_updates is not None else \
            f", {100 * DEFAULT_MIN_UPDATES_FRACTION:g} % of {family.baseline}'s {min(updates(family, family.baseline))}"
        failed.append(f"too few updates: {span(made)} optimizer updates, below the minimum of {floor}{where}")
    if claim.versus == "baseline" and claim.method != family.baseline:
        metric, gains = own_change(family, claim)
        interval = t_interval(gains)
        if interval is not None and interval[0] <= 0 <= interval[1]:
            failed.append(f"did not move from its start: its own {metric} change {sum(gains) / len(gains):+.4f} "
                          f"[{interval[0]:+.4f}, {interval[1]:+.4f}] includes 0")
    return failed


def gates(family: Family, claim: Claim, n_claims: int, alpha: float = ALPHA) -> list[str]:
    """The failed gates of a claim, in order (empty: the claim can be tested here)."""
    failed: list[str] = []
    if claim.not_testable:
        failed.append(f"pre-registered: {claim.not_testable}")
    if len(paired_diffs(family, claim)) < 2:
        failed.append("fewer than 2 paired seeds")
    failed += moved_gates(family, claim)
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
    return failed + _positive_control_gates(family, claim.metric, n_claims, alpha)


def control_outcome(family: Family, control: str, role: str, metric: str, n_claims: int,
                    alpha: float = ALPHA) -> tuple[dict[str, Any], bool | None]:
    """A control's paired test against the baseline on ``metric`` and its outcome: a positive control is
    detected (worse, p ≤ α/m, the strictest Holm step); a negative one is not different (p > α), reported
    only (it gates nothing: claims are judged against it as a second baseline arm). None: no seed paired."""
    test = claim_p(control_diffs(family, control, metric), "better", None)
    if test["p"] is None:
        return test, None
    if role == "positive_control":
        return test, test["p"] <= alpha / max(1, n_claims) and test["mean"] < 0
    return test, test["p"] > alpha


def _positive_control_gates(family: Family, metric: str, n_claims: int, alpha: float) -> list[str]:
    positives = family.with_role("positive_control")
    if not positives:
        return ["no positive control in the family (underpowered: detection is not shown)"]
    return [f"positive control {control} not detected on {metric}" for control in positives
            if not control_outcome(family, control, "positive_control", metric, n_claims, alpha)[1]]


def effect_of_interest(family: Family, claim: Claim, margin: float | None) -> tuple[float | None, str]:
    """The effect a *ruled out* verdict must exclude, with where it comes from: the paper's effect where the
    claim states one, else DEFAULT_MARGIN_FRACTION × the baseline's gain on the metric (better claims), or
    the margin (not worse / matches)."""
    if claim.direction != "better":
        return margin, "the margin"
    if claim.paper_effect is not None:
        return claim.paper_effect, "the paper's effect"
    gains = list(family.gains(family.baseline, claim.metric).values())
    mean = sum(gains) / len(gains) if gains else None
    if claim.versus == "baseline" and mean is not None and mean > 0:
        return DEFAULT_MARGIN_FRACTION * mean, f"{DEFAULT_MARGIN_FRACTION:g} × the baseline's gain"
    return None, "none (no paper effect, no baseline gain on the metric)"


def ruled_out(interval: tuple[float, float] | None, direction: str, margin: float | None,
              effect: float | None) -> bool:
    """Whether the 95 % interval of the oriented differences excludes the claimed effect (a *better* claim whose
    interval lies wholly above 0 is not ruled out, however small: it points the paper's way)."""
    if interval is None:
        return False
    lo, hi = interval
    if direction == "better":
        return effect is not None and hi < effect and lo <= 0
    if margin is None:
        return False
    return hi < -margin if direction == "not_worse" else (lo > margin or hi < -margin)


def arm(family: Family, claim: Claim, diffs: list[float], margin: float | None, name: str) -> dict[str, Any]:
    """One baseline arm's test of a claim: paired t, sign flip and 95 % interval of the differences."""
    return {"name": name, "diffs": diffs, "test": claim_p(diffs, claim.direction, margin),
            "flip": sign_flip_claim(diffs, claim.direction, margin) if diffs else None,
            "interval": t_interval(diffs)}


def twin_arms(family: Family, claim: Claim, margin: float | None) -> list[dict[str, Any]]:
    """The claim against each negative control (the baseline again with another RL seed), where the claim is
    against the baseline: the verdict must be the same against every baseline arm."""
    if claim.versus != "baseline":
        return []
    out = []
    for twin in family.with_role("negative_control"):
        diffs = pair_diffs(family, claim.method, twin, claim.metric)
        if len(diffs) >= 2:
            out.append(arm(family, claim, diffs, margin, twin))
    return out


def claim_id(family: Family, claim: Claim) -> str:
    """How the Holm-family file names a claim: ``family/method``."""
    return f"{family.name}/{claim.method}"


def check_holm_family(rows: list[dict[str, Any]], listed: list[str], where: str,
                      pending: tuple[str, ...] | list[str] = ()) -> None:
    """The claims with a p-value, and the pending ones (listed, their family not run yet), must be exactly
    those the committed Holm-family file lists."""
    tested = {claim_id(r["family"], r["claim"]) for r in rows if r["test"]["p"] is not None} | set(pending)
    what = "a p-value or pending" if pending else "a p-value"
    missing, extra = sorted(tested - set(listed)), sorted(set(listed) - tested)
    twice = sorted({c for c in listed if listed.count(c) > 1})
    if missing or extra or twice:
        problems = [f"claims with {what} that {where} does not list: {missing}" if missing else "",
                    f"listed in {where} but not a claim with {what}: {extra}" if extra else "",
                    f"listed twice in {where}: {twice}" if twice else ""]
        raise ConfigError("; ".join(p for p in problems if p) + " (the Holm family is fixed in advance: edit the "
                         "file only as a new pre-registration)")


def judge(families: list[Family], alpha: float = ALPHA, holm_family: list[str] | None = None,
          where: str = "the Holm-family file", pending: tuple[str, ...] | list[str] = ()) -> list[dict[str, Any]]:
    """Every claim's row: its tests against each baseline arm, Holm-corrected (t and sign flip separately)
    across the claims of ``holm_family`` (checked to be those with a p, and the ``pending`` ones), gates and
    verdict. Each pending claim (``family/method``, no results yet) enters both corrections with p =
    PENDING_P: m counts it, it takes the last ranks and is never rejected."""
    rows = []
    for family in families:
        for claim in family.claims:
            margin = margin_of(family, claim)
            main = arm(family, claim, paired_diffs(family, claim), margin, family.baseline)
            effect, source = effect_of_interest(family, claim, margin)
            rows.append({"family": family, "claim": claim, "margin": margin, "diffs": main["diffs"],
                         "test": main["test"], "flip": main["flip"], "interval": main["interval"],
                         "effect": effect, "effect_source": source, "twins": twin_arms(family, claim, margin)})
    if holm_family is not None:
        check_holm_family(rows, holm_family, where, pending)
    tested = [i for i, r in enumerate(rows) if r["test"]["p"] is not None]
    waiting = {("pending", c): PENDING_P for c in pending}  # after the tested claims: ties keep them last
    corrected = holm({**{i: rows[i]["test"]["p"] for i in tested}, **waiting}, alpha)
    flips = holm({**{i: rows[i]["flip"]["p"] for i in tested}, **waiting}, alpha)
    for i, row in enumerate(rows):
        row["holm"], row["flip_holm"] = corrected.get(i), flips.get(i)
        row["gates"] = gates(row["family"], row["claim"], len(corrected), alpha)
        row["verdict"], row["qualifier"], row["why"] = decide(row)
    return rows


def confirms(exploratory: dict[str, Any], confirmatory: dict[str, Any]) -> bool:
    """Whether a fresh-seed verdict confirms the exploratory one: the same decided kind (reproduced, opposite or
    ruled out); a *t test only* qualifier on either side is not compared."""
    return exploratory["verdict"] in DECIDED and confirmatory["verdict"] == exploratory["verdict"]


def decide(row: dict[str, Any]) -> tuple[str, str, str]:
    """(verdict kind, qualifier, the reason in one line) from a row's gates and its baseline arms."""
    if row["gates"]:
        why = "; ".join(row["gates"])
        if row["holm"] is None:
            return "not testable here", "", why
        kind, qualifier, alone = decide({**row, "gates": []})
        verdict = kind + (f", {qualifier}" if qualifier else "")
        return "not testable here", "", f"{why} (the paired test alone: {verdict}, {alone})"
    outcomes = [arm_outcome(row, row, row["holm"]["rejected"], row["flip_holm"]["rejected"])]
    for twin in row.get("twins", []):
        level, flip_level = row["holm"]["level"], row["flip_holm"]["level"]
        outcomes.append(arm_outcome(row, twin, twin["test"]["p"] <= level, twin["flip"]["p"] <= flip_level))
    kinds = {kind for kind, _, _ in outcomes}
    if len(kinds) > 1:
        return "inconclusive", "", "the baseline arms disagree: " + "; ".join(
            f"against {name}: {kind} ({why})" for (kind, _, why), name in zip(outcomes, _arm_names(row)))
    qualifier = T_ONLY if any(q for _, q, _ in outcomes) else ""
    why = outcomes[0][2] + "".join(f"; against {name}: the same ({o[2]})"
                                   for o, name in zip(outcomes[1:], _arm_names(row)[1:]))
    return outcomes[0][0], qualifier, why


def _arm_names(row: dict[str, Any]) -> list[str]:
    return [row["family"].baseline if "family" in row else "the baseline"] + [t["name"] for t in row.get("twins", [])]


def arm_outcome(row: dict[str, Any], one: dict[str, Any], t_rejected: bool,
                flip_rejected: bool) -> tuple[str, str, str]:
    """One arm's (kind, qualifier, why): a t rejection at the claim's Holm level gives the direction the mean
    points, provided the sign-flip test rejects at its own Holm level (*t test only* where its smallest p
    cannot reach that level); otherwise *ruled out* where the 95 % interval excludes the effect of interest,
    else *inconclusive*."""
    holm_row, flip_row, test, flip = row["holm"], row["flip_holm"], one["test"], one["flip"]
    t_text = f"t p = {test['p']:.3g} (Holm level {holm_row['level']:.3g})"
    flip_text = f"sign-flip p = {flip['p']:.3g} (Holm level {flip_row['level']:.3g})"
    if t_rejected:
        if flip["floor"] > flip_row["level"]:
            return test["if_rejected"], T_ONLY, (f"{t_text}; with {test['n']} seeds the sign-flip test cannot "
                                                 f"reach its Holm level {flip_row['level']:.3g} (its smallest p is "
                                                 f"{flip['floor']:.3g})")
        if flip_rejected:
            return test["if_rejected"], "", f"{t_text}; {flip_text} agrees"
        after = f"{t_text}, but the sign-flip test disagrees: {flip_text}"
    else:
        after = f"{t_text}: not rejected"
    return _not_rejected(row, one, after)


def _not_rejected(row: dict[str, Any], one: dict[str, Any], after: str) -> tuple[str, str, str]:
    claim, interval, effect = row["claim"], one["interval"], row["effect"]
    where = "—" if interval is None else f"[{interval[0]:+.3f}, {interval[1]:+.3f}]"
    target = {"better": f"{effect:+.3f}" if effect is not None else "none",
              "not_worse": f"−{row['margin']:.3f}" if row["margin"] else "none",
              "matches": f"±{row['margin']:.3f}" if row["margin"] else "none"}[claim.direction]
    if ruled_out(interval, claim.direction, row["margin"], effect):
        side = {"better": "excludes", "not_worse": "lies wholly below", "matches": "lies wholly outside"}
        return "ruled out", "", f"{after}; the 95 % interval {where} {side[claim.direction]} {target} " \
                                f"({row['effect_source']})"
    if target == "none":
        return "inconclusive", "", f"{after}; no effect of interest to exclude ({row['effect_source']})"
    if claim.direction == "better" and interval is not None and interval[0] > 0:
        return "inconclusive", "", (f"{after}; the 95 % interval {where} lies above 0, below {target} "
                                    f"({row['effect_source']}): a smaller effect the paper's way")
    side = {"better": "does not exclude", "not_worse": "does not lie wholly below",
            "matches": "does not lie wholly outside"}
    return "inconclusive", "", f"{after}; the 95 % interval {where} {side[claim.direction]} {target} " \
                               f"({row['effect_source']})"
