"""Power of a family: how large an effect its seeds can detect on each claim metric.

Per claim metric (claims against the baseline): the pooled SD of the per-seed paired differences over
the family's claims on that metric, and the minimum detectable effect at 80 % power of the paired t
test at α and at α/m, Holm's strictest step (the worst case for the first claim tested), with the seeds
a 3-point MDE would need at α/m. ``rlvr findings`` takes m = every claim of the findings; ``rlvr
compare`` takes m = the file's own claims (a file without claims: every method against the baseline
on greedy accuracy, m = their count), so its MDE is the looser of the two. ``expected_power`` gives what
a planned re-run should reach: the same SD, the MDE at the re-run's seed count (a pending confirmation).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rlvr.compare.claims import Claim
from rlvr.compare.config import CompareConfig
from rlvr.compare.verdict_tests import ALPHA, mde, pooled_sd, seeds_for
from rlvr.compare.verdicts import Family, described_claims, paired_diffs

TARGET_MDE = 0.03  # the aim: 3 points on a fraction-valued claim metric
UNITLESS = ("seconds", "rollouts")  # metrics not on a 0-1 scale: no seeds-for-3-points column


def family_power(family: Family, n_claims: int, alpha: float = ALPHA) -> list[dict[str, Any]]:
    """Per claim metric of the family (``described_claims``: those against the baseline, else its own-gain
    ones, whose per-seed gains are the differences): pooled SD of the paired differences, MDE at the
    family's seed count at α and at α/m, seeds for a 3-point MDE at α/m."""
    by_metric: dict[str, list[list[float]]] = {}
    for claim in described_claims(family):
        by_metric.setdefault(claim.metric, []).append(paired_diffs(family, claim))
    out = []
    for metric, groups in by_metric.items():
        sd, n = pooled_sd(groups), max((len(g) for g in groups), default=0)
        strict = alpha / max(1, n_claims)
        out.append({"metric": metric, "sd": sd, "n": n, "mde": mde(sd, n, alpha) if sd else None,
                    "mde_corrected": mde(sd, n, strict) if sd else None,
                    "seeds_3pt": None if metric in UNITLESS or not sd else seeds_for(sd, TARGET_MDE, strict)})
    return out


def expected_power(family: Family, claims: tuple[Claim, ...], seeds: int, n_claims: int,
                   alpha: float = ALPHA) -> list[dict[str, Any]]:
    """The power a re-run of ``claims`` on ``seeds`` new seeds should reach: ``family_power`` of those claims
    in ``family`` (the SD of their paired differences there), its MDEs recomputed at ``seeds``."""
    out = []
    for row in family_power(replace(family, claims=claims), n_claims, alpha):
        sd, strict = row["sd"], alpha / max(1, n_claims)
        out.append({**row, "n": seeds, "mde": mde(sd, seeds, alpha) if sd else None,
                    "mde_corrected": mde(sd, seeds, strict) if sd else None})
    return out


def compare_power(cfg: CompareConfig, records: list[dict[str, Any]], alpha: float = ALPHA) -> dict[str, Any]:
    """The power section of a comparison's report: m, α and ``family_power``'s rows."""
    baseline = cfg.baseline or cfg.methods[0].name
    roles = {m.name: ("baseline" if m.name == baseline else m.role) for m in cfg.methods}
    claims = tuple(m.claim for m in cfg.methods if m.claim is not None)
    registered = bool(claims)
    if not registered:  # every method (controls too) against the baseline on greedy accuracy
        claims = tuple(Claim(method=m.name, section="", title=m.name, paper="", metric="accuracy_after")
                       for m in cfg.methods if m.name != baseline)
    family = Family(name=cfg.out_dir.name, baseline=baseline, claims=claims, roles=roles, records=records,
                    seeds=tuple(cfg.seeds))
    m = max(1, len(claims))
    return {"alpha": alpha, "m": m, "registered": registered, "rows": family_power(family, m, alpha)}
