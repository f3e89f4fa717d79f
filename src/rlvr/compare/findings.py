"""``rlvr findings``: docs/findings.md written from the committed results, every verdict computed.

Inputs, all committed: each comparison file ``configs/compare/<family>.yaml`` (its pre-registered
claims and run roles), ``docs/results/<family>/results.json`` (every run's numbers) and, where there is
one, ``run_metrics.json`` (per-seed training metrics); ``configs/claims_untested.yaml`` lists claims
no family measures; ``docs/findings_notes.md`` is hand-written prose appended under its own heading.
``--check`` compares the committed docs/findings.md with what these give and fails on a difference.

The fresh-seed confirmation (issue 47): ``configs/confirm/<family>.yaml`` re-runs a family's decided claims
unchanged on new seeds, its results under ``docs/results/confirm/<family>/``; ``configs/confirm/holm_family.yaml``
lists the confirmatory Holm family (fixed: a family not run yet is *pending*, its claims counted in m with
p = 1, ``rlvr.compare.verdicts.judge``) and ``configs/confirm/FROZEN`` the commit that froze them. Every
confirmatory claim is judged by ``judge``, the exploratory rules unchanged.

The transfer to a real pretrained model (issue 47): ``configs/transfer/<family>.yaml`` carries testbed claims
over to SmolLM2-135M-Instruct on reasoning-gym (each claim as its testbed family registered it; only its mechanism
may change, with a note saying why), ``configs/transfer/holm_family.yaml`` is its own Holm family, fixed before its
runs, and ``docs/results/transfer/<family>/results.json`` its results once run. Its verdicts come from ``judge``
too; a transfer file without claims (a pilot) is skipped. The transfer table puts each claim's testbed verdicts
(exploratory, confirmatory) beside its real-model one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from rlvr.compare.claims import DEFAULT_MIN_UPDATES_FRACTION, Claim, parse_claim
from rlvr.compare.config import CompareConfig, load_compare
from rlvr.compare.power import expected_power, family_power
from rlvr.compare.problem_pairs import pair_problems
from rlvr.compare.verdict_tests import ALPHA, EXACT_UP_TO, claim_p, sign_flip_claim
from rlvr.compare.verdicts import (KINDS, Family, baseline_gain, claim_id, confirms, control_outcome,
                                   described_claims, judge, oriented, pair_diffs, span, updates)
from rlvr.train.config import ConfigError

FINDINGS = Path("docs/findings.md")
NOTES = Path("docs/findings_notes.md")
UNTESTED = Path("configs/claims_untested.yaml")
HOLM_FAMILY = Path("configs/holm_family.yaml")
CONFIRM = Path("configs/confirm")  # the fresh-seed confirmation's comparison files
CONFIRM_HOLM = CONFIRM / "holm_family.yaml"  # its Holm family, fixed before any of its runs
CONFIRM_RESULTS = Path("docs/results/confirm")  # <family>/results.json once a family has run
FROZEN = CONFIRM / "FROZEN"  # the commit that froze configs/confirm/ (git's short id)
TRANSFER = Path("configs/transfer")  # testbed claims carried over to a real pretrained model
TRANSFER_HOLM = TRANSFER / "holm_family.yaml"  # its Holm family, fixed before any of its runs
TRANSFER_RESULTS = Path("docs/results/transfer")  # <family>/results.json once a transfer family has run
# Descriptive comparisons outside every Holm family: (family, method) -> the claim-less arm the method is built
# on, whose paired difference the method's row states (MMPO is Dr. GRPO's advantage re-weighted, issue 47).
BASE_ARMS = {("length", "mmpo"): "dr_grpo"}


def holm_family(root: Path, rel: Path = HOLM_FAMILY) -> list[str]:
    """The committed list of claims (``family/method``) that Holm's correction counts."""
    path = root / rel
    if not path.exists():
        raise ConfigError(f"{path} does not exist: it lists, in advance, the claims Holm's correction counts")
    raw = yaml.safe_load(path.read_text()) or {}
    claims = raw.get("claims") if isinstance(raw, dict) else None
    if not isinstance(claims, list) or not all(isinstance(c, str) and "/" in c for c in claims):
        raise ConfigError(f"{path}: 'claims' must be a list of 'family/method' names, got {claims!r}")
    return claims


def load_families(root: Path) -> list[Family]:
    """Every comparison file with claims and a committed results.json, in file-name order."""
    families = []
    for path in sorted((root / "configs" / "compare").glob("*.yaml")):
        results = root / "docs" / "results" / path.stem / "results.json"
        cfg = load_compare(path, build=False)
        if not _claims(cfg):
            continue
        if not results.exists():
            raise ConfigError(f"{path} pre-registers claims but {results} does not exist")
        families.append(read_family(path, cfg, results))
    return families


def _claims(cfg: CompareConfig) -> tuple[Claim, ...]:
    return tuple(m.claim for m in cfg.methods if m.claim is not None)


def read_family(path: Path, cfg: CompareConfig, results: Path) -> Family:
    """A comparison file's claims and roles with its committed results.json (and the run_metrics.json beside
    it, one ``benchmarks/run_metrics.py`` line a method and window)."""
    baseline = cfg.baseline or cfg.methods[0].name
    roles = {m.name: ("baseline" if m.name == baseline else m.role) for m in cfg.methods}
    metrics = results.parent / "run_metrics.json"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] \
        if metrics.exists() else []
    records = json.loads(results.read_text())["runs"]
    clash = sorted({r["method"] for r in records if r.get("role") not in (None, roles.get(r["method"]))})
    if clash:
        raise ConfigError(f"{results}: the role recorded for {clash} differs from {path}'s; re-run the family")
    return Family(name=path.stem, baseline=baseline, claims=_claims(cfg), roles=roles, records=records,
                  run_metrics=rows, seeds=_recorded_seeds(records, baseline))


def _recorded_seeds(records: list[dict], baseline: str) -> tuple[int, ...]:
    """The seeds of the baseline's finished runs: what the table rests on, whatever the file lists now."""
    return tuple(sorted({r["seed"] for r in records if r["method"] == baseline and r["status"] == "done"}))


def untested_claims(root: Path) -> list[Claim]:
    path = root / UNTESTED
    if not path.exists():
        return []
    raw = yaml.safe_load(path.read_text()) or {}
    out = [parse_claim(str(name), spec, str(path)) for name, spec in raw.items()]
    missing = [c.method for c in out if not c.not_testable]
    if missing:
        raise ConfigError(f"{path}: {missing} need a 'not_testable' reason (no family measures them)")
    return out


@dataclass(frozen=True)
class Confirmation:
    """The fresh-seed confirmation: every confirmation file (run or pending), its judged rows and its freeze."""

    frozen: str  # the commit that froze configs/confirm/ (configs/confirm/FROZEN)
    listed: tuple[str, ...]  # configs/confirm/holm_family.yaml: the claims its Holm correction counts
    configs: dict[str, CompareConfig]  # family -> its confirmation file, run or not
    run: tuple[Family, ...]  # the families with a committed docs/results/confirm/<family>/results.json
    rows: dict[str, dict[str, Any]]  # claim id -> its confirmatory row (run families only)
    tables: tuple[str, ...] = ()  # the run families whose results.md is committed beside results.json


def load_confirmation(root: Path, exploratory: list[dict[str, Any]], alpha: float = ALPHA) -> Confirmation | None:
    """The confirmation files with their committed results, checked against the confirmatory Holm family and
    the exploratory claims, every run claim judged by ``judge`` (the pending ones counted in m at p = 1).
    None where the repository has no confirmatory Holm family."""
    if not (root / CONFIRM_HOLM).exists():
        return None
    listed, configs, run = _filed_families(root, CONFIRM_HOLM, CONFIRM_RESULTS)
    claims = {f"{name}/{c.method}": c for name, cfg in configs.items() for c in _claims(cfg)}
    check_confirm_claims(claims, listed, {claim_id(r["family"], r["claim"]): r["claim"] for r in exploratory})
    ran = {f.name for f in run}
    pending = [c for c in listed if c.split("/", 1)[0] not in ran]
    rows = judge(run, alpha, listed, str(CONFIRM_HOLM), pending=pending)
    tables = tuple(f.name for f in run if (root / CONFIRM_RESULTS / f.name / "results.md").exists())
    return Confirmation(frozen=frozen_commit(root), listed=tuple(listed), configs=configs, run=tuple(run),
                        rows={claim_id(r["family"], r["claim"]): r for r in rows}, tables=tables)


def _filed_families(root: Path, holm: Path, results_root: Path, skip_claimless: bool = False
                    ) -> tuple[list[str], dict[str, CompareConfig], list[Family]]:
    """The Holm family listed in ``holm`` and the comparison files beside it (``skip_claimless``: not those
    without claims, such as a pilot), each with its committed ``results_root/<file>/results.json`` where it exists."""
    listed = holm_family(root, holm)
    configs, run = {}, []
    for path in sorted((root / holm.parent).glob("*.yaml")):
        if path.name == holm.name:
            continue
        cfg = load_compare(path, build=False)
        if skip_claimless and not _claims(cfg):
            continue
        configs[path.stem] = cfg
        results = root / results_root / path.stem / "results.json"
        if results.exists():
            run.append(read_family(path, cfg, results))
    return listed, configs, run


def _check_listed(claimed: set[str], listed: list[str], where: str, holm: Path, what: str) -> None:
    """The files ``where`` must claim exactly what the Holm-family file ``holm`` lists."""
    unlisted, unclaimed = sorted(claimed - set(listed)), sorted(set(listed) - claimed)
    if unlisted or unclaimed:
        raise ConfigError(" and ".join(part for part in (
            f"{where} claim {unlisted}, which {holm} does not list" if unlisted else "",
            f"{holm} lists {unclaimed}, which no file of {where} claims" if unclaimed else "") if part)
            + f" ({what} is fixed before its runs: the two must name the same claims)")


def check_confirm_claims(claims: dict[str, Claim], listed: list[str], exploratory: dict[str, Claim]) -> None:
    """The confirmation files must claim exactly what the confirmatory Holm family lists, each claim exactly as
    its exploratory comparison file registered it (a confirmation re-runs a claim; it does not restate it)."""
    where = f"{CONFIRM}/*.yaml"
    _check_listed(set(claims), listed, where, CONFIRM_HOLM, "the confirmatory Holm family")
    changed = sorted(c for c, claim in claims.items() if exploratory.get(c) != claim)
    if changed:
        raise ConfigError(f"{where}: the claims {changed} are not those configs/compare/ registered (a confirmation "
                          "re-runs each claim unchanged: metric, direction, margin, mechanism and all)")


def frozen_commit(root: Path) -> str:
    """The commit named in configs/confirm/FROZEN: its first line that is not a comment."""
    path = root / FROZEN
    lines = [x.strip() for x in path.read_text().splitlines() if x.strip() and not x.startswith("#")] \
        if path.exists() else []
    if not lines or not re.fullmatch(r"[0-9a-f]{7,40}", lines[0]):
        raise ConfigError(f"{path} must name, on its first line that is not a comment, the commit (hex) that froze "
                          f"{CONFIRM}/ before any confirmation run")
    return lines[0]


@dataclass(frozen=True)
class Transfer:
    """The transfer families (testbed claims re-run on a real pretrained model): files, judged rows, testbed ids."""

    listed: tuple[str, ...]  # configs/transfer/holm_family.yaml: the claims its Holm correction counts
    configs: dict[str, CompareConfig]  # family -> its transfer file (those with claims), run or not
    run: tuple[Family, ...]  # the families with a committed docs/results/transfer/<family>/results.json
    rows: dict[str, dict[str, Any]]  # claim id -> its real-model row (run families only)
    testbed: dict[str, str]  # transfer claim id -> the testbed claim id it carries over


def load_transfer(root: Path, exploratory: list[dict[str, Any]], alpha: float = ALPHA) -> Transfer | None:
    """The transfer files with claims and their committed results, checked against their Holm family and the
    testbed claims they carry over, every run claim judged by ``judge`` (the pending ones in m at p = 1). None
    where the repository has no transfer Holm family."""
    if not (root / TRANSFER_HOLM).exists():
        return None
    listed, configs, run = _filed_families(root, TRANSFER_HOLM, TRANSFER_RESULTS, skip_claimless=True)
    claims = {f"{name}/{c.method}": c for name, cfg in configs.items() for c in _claims(cfg)}
    testbed = check_transfer_claims(claims, listed, {claim_id(r["family"], r["claim"]): r["claim"] for r in exploratory})
    ran = {f.name for f in run}
    pending = [c for c in listed if c.split("/", 1)[0] not in ran]
    rows = judge(run, alpha, listed, str(TRANSFER_HOLM), pending=pending)
    return Transfer(listed=tuple(listed), configs=configs, run=tuple(run),
                    rows={claim_id(r["family"], r["claim"]): r for r in rows}, testbed=testbed)


def check_transfer_claims(claims: dict[str, Claim], listed: list[str], exploratory: dict[str, Claim]) -> dict[str, str]:
    """The transfer files must claim exactly what the transfer Holm family lists, each claim the one testbed claim
    of the same method and section, unchanged but for its mechanism (which may change only with a ``note``
    saying why the testbed's cannot apply). Returns transfer claim id -> testbed claim id."""
    where = f"{TRANSFER}/*.yaml"
    _check_listed(set(claims), listed, where, TRANSFER_HOLM, "the transfer's Holm family")
    out = {}
    for key, claim in claims.items():
        found = [k for k, c in exploratory.items() if c.method == claim.method and c.section == claim.section]
        if len(found) != 1:
            raise ConfigError(f"{where}: claim {key} ({claim.section}) must carry over exactly one testbed claim of "
                              f"method '{claim.method}' and section {claim.section}; found {found or 'none'}")
        theirs = exploratory[found[0]]
        if replace(claim, mechanism=None, note="") != replace(theirs, mechanism=None, note=""):
            raise ConfigError(f"{where}: claim {key} is not {found[0]} as configs/compare/ registered it (a transfer "
                              "carries the claim over unchanged: text, metric, direction, margin and all)")
        if claim.mechanism != theirs.mechanism and not claim.note:
            raise ConfigError(f"{where}: claim {key} changes {found[0]}'s mechanism without a note saying why the "
                              "testbed's cannot apply on the real model")
        out[key] = found[0]
    return out


def render(root: Path, alpha: float = ALPHA) -> str:
    """The whole docs/findings.md text."""
    families = load_families(root)
    rows = judge(families, alpha, holm_family(root), str(HOLM_FAMILY))
    confirm = load_confirmation(root, rows, alpha)
    transfer = load_transfer(root, rows, alpha)
    m = sum(r["holm"] is not None for r in rows)
    lines = [*_head(m, alpha, families, rows, confirm), *_family_table(families, rows, m, alpha, confirm),
             *_claim_table(rows, confirm), *_confirmation_section(confirm, rows, families, alpha),
             *_transfer_section(transfer, rows, confirm, alpha),
             *_problem_section(rows), *_untested_lines(untested_claims(root)), *_notes(root)]
    return "\n".join(lines).rstrip() + "\n"


def _head(m: int, alpha: float, families: list[Family], rows: list[dict], confirm: Confirmation | None) -> list[str]:
    return [
        "# Findings: does each seed method do what its paper says, on the tiny-model testbed?", "",
        "<!-- Generated by `rlvr findings` from configs/compare/*.yaml (the pre-registered claims), "
        "configs/confirm/ (their fresh-seed confirmation) and docs/results/**/results.json; do not edit by hand "
        "(edit docs/findings_notes.md, then regenerate). `rlvr findings --check` fails when this file differs "
        "from what the committed results give. -->", "",
        _status_sentence(rows, confirm), "",
        "## How the verdicts are computed", "",
        "Every verdict below is computed by `rlvr findings` (`src/rlvr/compare/verdicts.py`) from the committed "
        "per-run results; each comparison file pre-registers, per method, the metric that decides its row, the "
        "direction (*better*, *not worse* or *matches* within a margin; the default margin is 0.25 × the "
        "baseline's gain on that metric), the mechanism that must fire and the subset the claim is about.", "",
        *_rules(m, alpha, families), ""]


def _rules(m: int, alpha: float, families: list[Family]) -> list[str]:
    return [
        "- **Gates first.** A claim is *not testable here* (the failed gates named) unless: the method made at "
        f"least its pre-registered minimum of optimizer updates (`min_updates`; default "
        f"{100 * DEFAULT_MIN_UPDATES_FRACTION:g} % of the baseline's fewest, rounded up); for a claim against "
        "the baseline, the "
        "method's own change from its starting point (the claim's metric where its value before RL is recorded, "
        "else greedy accuracy) has a 95 % interval that excludes 0; the baseline's greedy gain over its warm "
        "start has a 95 % interval above 0; the pre-registered mechanism reached its threshold; the claim's "
        "subset is not 0 in every run; the family's positive control (a deliberately harmed baseline) was "
        "detected on the claim's metric at α/m. " + _controlled(families) + " Where a gate failed, *why* adds "
        "what the tests alone give.",
        f"- **Test.** Paired Student t on the per-seed differences (method − baseline on the same warm start), "
        f"two-sided for *better* and *not worse* (H0: difference = −margin), two one-sided tests for *matches*. "
        f"**Holm's correction across the {m} claims listed in `{HOLM_FAMILY}`** (fixed in advance: `rlvr "
        f"findings` stops when the claims with a p-value are not exactly those) at α = {alpha:g}.",
        f"- **Sign-flip test.** The sign-flip test of the same hypothesis, exact (every sign assignment counted) "
        f"up to {EXACT_UP_TO} seeds (beyond that estimated from 20,000 random flips and marked *est.*), "
        "Holm-corrected on its own across the same claims, must reject too. Its "
        "smallest two-sided p is 2/2ⁿ; where that is above its Holm level (10 seeds: 0.00195), the verdict reads "
        "*reproduced, t test only* or *opposite, t test only*: the t test alone decided it.",
        "- **Both baseline arms.** A claim against the baseline is tested the same way against the family's "
        "negative control (the baseline again with another RL seed), at the same Holm levels; the verdict must "
        "be the same against both, else it is *inconclusive* (the arms disagree). The negative control voids "
        "nothing on its own (see docs/comparisons.md).",
        "- **Not rejected.** *Ruled out* where the 95 % interval of the differences (not corrected across "
        "claims) excludes the effect of interest: the paper's effect where the claim states one (`paper_effect`), "
        "else 0.25 × the baseline's gain on the metric (*better*), the margin (*not worse*: the interval lies "
        "below −margin; *matches*: outside ±margin), against every baseline arm; a *better* claim whose interval "
        "lies wholly above 0 is never ruled out. Otherwise *inconclusive*. A t rejection the sign-flip test "
        "does not confirm is read the same way.",
        "- **Power.** Per family and claim metric: the pooled SD of the paired differences and the minimum "
        "detectable effect at 80 % power, MDE = (t_{1−α/2, n−1} + t_{0.80, n−1}) · SD / √n, at α and at "
        f"α/m = {alpha / max(1, m):.2g} (the strictest Holm step); and the seeds a 3-point MDE at α/m needs."]


def _status_sentence(rows: list[dict], confirm: Confirmation | None) -> str:
    """What in this file is exploratory and what is confirmatory."""
    if confirm is None:
        return ("**Every verdict here is exploratory.** The rules below were changed after these results had been "
                "seen (issue 47); they hold as confirmatory only once re-run on fresh seeds, which is pending "
                "(docs/findings_notes.md).")
    confirmed, not_confirmed, pending = confirmation_counts(rows, confirm)
    m = len(confirm.listed)
    status = (f"No family has been re-run yet, so nothing here is confirmatory yet ({pending} claims pending)."
              if not confirm.run else
              f"So far {len(confirm.run)} of {len(confirm.configs)} families have been re-run: confirmed "
              f"{confirmed}, not confirmed {not_confirmed}, pending {pending}.")
    return (f"**Exploratory, except one column.** The rules below were changed after the results had been seen "
            f"(issue 47), so every verdict in the *verdict* column is exploratory. The {m} claims it decided "
            f"(reproduced, opposite or ruled out) were then frozen (commit {confirm.frozen}) and are re-run "
            f"unchanged on fresh seeds ({_seed_text(confirm)}) under the same rules, Holm-corrected across those "
            f"{m}: only the *confirmatory* column of the claims table, and the section *Confirmation on fresh seeds*, "
            f"are confirmatory. {status}")


def _controlled(families: list[Family]) -> str:
    """The sentence saying which committed families can publish verdicts (those with a positive control)."""
    with_control = [f.name for f in families if "positive_control" in f.roles.values()]
    if not with_control:
        return ("**No committed family has a positive control yet**, so every row is *not testable here* "
                "(underpowered: detection is not shown).")
    return (f"**{len(with_control)} of {len(families)} committed families have a positive control** "
            f"({', '.join(with_control)}); the rows of the others are *not testable here* (underpowered: "
            "detection is not shown).")


FAMILY_HEAD = ("| family · comparison file · table | baseline | seeds | baseline gain (greedy) | controls | "
               "claim metric: SD of paired Δ, MDE at α = {alpha:g}, MDE at α/m, seeds for MDE ≤ 0.03 at α/m "
               "| verdicts |")
CLAIM_HEAD = ("| method | paper's claim | family · metric · direction | Δ (n) "
              "| p · Holm · flip (floor) · flip Holm | verdict | why |")


def _family_table(families: list[Family], rows: list[dict], m: int, alpha: float,
                  confirm: Confirmation | None = None) -> list[str]:
    lines = ["## Families: baseline gain, power and verdict counts", "", FAMILY_HEAD.format(alpha=alpha),
             "|---|---|---:|---|---|---|---|"]
    lines += [_family_row(family, [r for r in rows if r["family"] is family], m, alpha) for family in families]
    return lines + ["", verdict_summary(rows, confirm), ""]


SUMMARY_START = "All claims"


def verdict_summary(rows: list[dict], confirm: Confirmation | None = None) -> str:
    """One line: the count of each verdict kind and the methods decided either way, then the confirmation's
    counts (the README quotes it; tests/unit/compare/test_findings.py checks that it does, word for word)."""
    parts = []
    for kind in KINDS:
        decided = [r for r in rows if r["verdict"] == kind]
        names = [_decided_name(r) for r in decided] if kind in ("reproduced", "opposite") else []
        parts.append(f"{kind} {len(decided)}" + (f" ({'; '.join(names)})" if names else ""))
    line = f"{SUMMARY_START} ({len(rows)}): " + ", ".join(parts) + "."
    if confirm is None:
        return line
    confirmed, not_confirmed, pending = confirmation_counts(rows, confirm)
    return (f"{line} Re-run on fresh seeds ({len(confirm.listed)}): confirmed {confirmed}, not confirmed "
            f"{not_confirmed}, pending {pending}.")


def confirmation_counts(rows: list[dict], confirm: Confirmation) -> tuple[int, int, int]:
    """(confirmed, not confirmed, pending) over the confirmatory Holm family's claims."""
    exploratory = {claim_id(r["family"], r["claim"]): r for r in rows}
    ran = [c for c in confirm.listed if c in confirm.rows]
    confirmed = sum(confirms(exploratory[c], confirm.rows[c]) for c in ran)
    return confirmed, len(ran) - confirmed, len(confirm.listed) - len(ran)


def _decided_name(row: dict) -> str:
    claim, notes = row["claim"], []
    if row["qualifier"]:
        notes.append(row["qualifier"])
    if claim.paper_baseline:
        notes.append(f"against {row['family'].baseline}, not the paper's {claim.paper_baseline.split(',')[0]}")
    return claim.title + (f": {', '.join(notes)}" if notes else "")


def _family_row(family: Family, rows: list[dict], m: int, alpha: float, files: str = "") -> str:
    gain = baseline_gain(family)
    gain_text = "—" if gain["interval"] is None else \
        f"{gain['mean']:+.3f} [{gain['interval'][0]:+.3f}, {gain['interval'][1]:+.3f}] (n = {gain['n']})"
    controls = "; ".join(_control_outcome(family, c, role, m, alpha) for c, role in family.roles.items()
                         if role.endswith("control")) or "none"
    counts = ", ".join(f"{k}: {n}" for k in KINDS if (n := sum(r["verdict"] == k for r in rows)))
    files = files or (f"{family.name} · `configs/compare/{family.name}.yaml` · "
                      f"[docs/results/{family.name}/results.md](results/{family.name}/results.md)")
    return (f"| {files} | {family.baseline} | {len(family.seeds)} | {gain_text} | {controls} "
            f"| {_power_cell(family_power(family, m, alpha))} | {counts} |")


def _power_cell(power: list[dict]) -> str:
    """Per claim metric: SD of the paired differences, MDE at α and at α/m, seeds for a 3-point MDE at α/m."""
    return "; ".join(f"{p['metric']}: {_num(p['sd'])}, {_num(p['mde'])}, {_num(p['mde_corrected'])}, "
                     f"{'—' if p['seeds_3pt'] is None else p['seeds_3pt']}" for p in power) or "—"


def _control_outcome(family: Family, control: str, role: str, m: int, alpha: float) -> str:
    """A control's outcome on each claim metric of its family, as the gates judge it (``control_outcome``)."""
    words = {"positive_control": ("not detected", "detected"), "negative_control": ("differed", "not different")}
    parts = []
    for metric in dict.fromkeys(c.metric for c in described_claims(family)):
        test, passed = control_outcome(family, control, role, metric, m, alpha)
        if passed is None:
            parts.append(f"{metric}: not run")
            continue
        half = f" ± {_half(test):.3f}" if test["sd"] else ""
        delta = oriented(metric) * test["mean"]
        parts.append(f"{metric} {delta:+.3f}{half}, p = {test['p']:.2g}: {words[role][passed]}")
    return f"{control} ({role.split('_')[0]}): " + ("; ".join(parts) or "no claim against the baseline")


def _claim_table(rows: list[dict], confirm: Confirmation | None = None) -> list[str]:
    head, rule = CLAIM_HEAD, "|---|---|---|---|---|---|---|"
    if confirm is not None:  # the confirmatory verdict beside the exploratory one
        head = head.replace("| verdict |", f"| verdict | confirmatory (fresh seeds {_seed_text(confirm)}) |")
        rule += "---|"
    lines = ["## The claims", "",
             "Δ: mean paired difference (method − baseline; for *versus warm start*: the method's own gain) in "
             "the metric's units ± 95 % t half-width; p: paired t; Holm: the adjusted p; flip: the sign-flip p "
             "(and its floor; exact unless marked *est.*), flip Holm: its own Holm-adjusted p. Updates: the "
             "optimizer updates each arm made, stated where they differ at an equal sample budget. Lower is "
             "better for seconds, Brier and ECE. *subset X*: the claim is about those "
             "problems; its gate needs the metric on them to be above 0 in some run (the test is on the whole-set "
             "metric). Where a gate failed, *why* adds in parentheses what the paired test alone gives."
             + _confirm_column_text(confirm), "", head, rule]
    ordered = sorted(rows, key=lambda r: _section_key(r["claim"].section))
    return lines + [_claim_row(row, None if confirm is None else _confirm_cell(row, confirm)) for row in ordered] + [""]


def _confirm_column_text(confirm: Confirmation | None) -> str:
    if confirm is None:
        return ""
    return (" *Confirmatory*: the same claim judged on its fresh seeds (section *Confirmation on fresh seeds*): "
            "verdict, whether it confirms the exploratory one, Δ (n), and p · Holm · flip Holm across the "
            f"{len(confirm.listed)} claims of `{CONFIRM_HOLM}`; *pending* where its family has not been re-run, "
            "— where the claim was not decided and is not re-run.")


def _confirm_cell(row: dict, confirm: Confirmation) -> str:
    """A claim's confirmatory cell: '—' (not re-run), pending, or its fresh-seed verdict, Δ (n) and p's."""
    key = claim_id(row["family"], row["claim"])
    if key not in confirm.listed:
        return "—"
    if key not in confirm.rows:
        return "pending (not re-run yet)"
    fresh = confirm.rows[key]
    status = "confirmed" if confirms(row, fresh) else "not confirmed"
    test = fresh["test"]
    stats = "no p" if test["p"] is None else \
        f"p {test['p']:.3g} · Holm {fresh['holm']['p_holm']:.3g} · flip Holm {fresh['flip_holm']['p_holm']:.3g}"
    return f"*{_verdict_text(fresh)}*, {status} · {_delta(fresh)} · {stats}"


def _verdict_text(row: dict) -> str:
    return row["verdict"] + (f", {row['qualifier']}" if row["qualifier"] else "")


def _delta(row: dict) -> str:
    """Δ ± 95 % half-width (n), oriented so that positive is better for the method."""
    test = row["test"]
    if test["mean"] is None:
        return "—"
    half = "" if not test["sd"] else f" ± {_half(test):.3f}"
    return f"{oriented(row['claim'].metric) * test['mean']:+.3f}{half} (n = {test['n']})"


def _claim_row(row: dict, confirm_cell: str | None = None) -> str:
    claim, test, flip, family = row["claim"], row["test"], row["flip"], row["family"]
    versus = "its warm start" if claim.versus == "warm_start" else family.baseline
    direction = claim.direction.replace("_", " ") + (f" (margin {row['margin']:.3f})" if row["margin"] else "")
    stats = "—" if test["p"] is None else \
        (f"{test['p']:.3g} · {row['holm']['p_holm']:.3g} · {flip['p']:.3g}{'' if flip['exact'] else ' est.'} "
         f"({flip['floor']:.3g}) · {row['flip_holm']['p_holm']:.3g}")
    subset = f", subset {claim.subset}" if claim.subset else ""
    notes = (_updates_note(family, claim), _paper_baseline_note(family, claim), _base_arm_note(family, claim),
             claim.note)
    extra = " ".join(x for x in notes if x)
    confirmatory = "" if confirm_cell is None else f" {confirm_cell} |"
    return (f"| {claim.section} {claim.title} | {claim.paper} | {family.name} · {claim.metric}{subset} vs {versus} · "
            f"{direction} | {_delta(row)} | {stats} | *{_verdict_text(row)}* |{confirmatory} "
            f"{row['why']}.{' ' + extra if extra else ''} |")


def _base_arm_note(family: Family, claim: Claim, arms: dict[tuple[str, str], str] = BASE_ARMS) -> str:
    """For a method built on another arm of its family (``BASE_ARMS``): the paired difference from that arm
    on the claim's metric, descriptive (outside every Holm family), or that the arm has not run yet."""
    base = arms.get((family.name, claim.method))
    if base is None:
        return ""
    label = f"Against {base}, the arm {claim.method} is built on (descriptive, outside the Holm family):"
    if not any(r["method"] == base and r["status"] == "done" for r in family.records):
        return f"{label} the {base} arm has not run yet."
    diffs = pair_diffs(family, claim.method, base, claim.metric)
    test = claim_p(diffs, "better", None)
    if test["p"] is None:
        return f"{label} {len(diffs)} paired seed{'s' if len(diffs) != 1 else ''}, too few for a test."
    flip = sign_flip_claim(diffs, "better", None)
    return (f"{label} {claim.metric} {test['mean']:+.3f} ± {_half(test):.3f} (n = {test['n']}), t p = "
            f"{test['p']:.3g}, sign-flip p = {flip['p']:.3g}{'' if flip['exact'] else ' est.'}.")


def _updates_note(family: Family, claim: Claim) -> str:
    """The optimizer updates of the method and the baseline, where they differ (equal samples, unequal steps)."""
    ours, theirs = updates(family, claim.method), updates(family, family.baseline)
    if claim.method == family.baseline or not ours or not theirs or span(ours) == span(theirs):
        return ""
    return f"Updates at an equal sample budget: {claim.method} {span(ours)}, {family.baseline} {span(theirs)}."


def _paper_baseline_note(family: Family, claim: Claim) -> str:
    if not claim.paper_baseline:
        return ""
    return (f"The paper's comparison is against {claim.paper_baseline}; this row is against {family.baseline}, "
            "so it does not test the paper's comparison.")


def _confirmation_section(confirm: Confirmation | None, rows: list[dict], families: list[Family],
                          alpha: float) -> list[str]:
    """The confirmation's rules, each family's status and power, and the re-run claims judged on fresh seeds."""
    if confirm is None:
        return []
    m, (confirmed, not_confirmed, pending) = len(confirm.listed), confirmation_counts(rows, confirm)
    lines = ["## Confirmation on fresh seeds", "",
             f"The {m} claims whose exploratory verdict was decided (reproduced, opposite or ruled out) were frozen "
             f"in commit {confirm.frozen} (named in `{FROZEN}`), before any confirmation run: "
             f"`{CONFIRM}/<family>.yaml` re-runs each claim unchanged, with its family's baseline and both controls, "
             f"at the same budget and regime on seeds never run before ({_seed_text(confirm)}), and "
             f"`{CONFIRM_HOLM}` lists them as the confirmatory Holm family. `rlvr findings` judges them with the "
             "same code and rules as every other row (gates, both baseline arms, exact sign-flip, ruled out "
             f"against inconclusive), with Holm's correction, for the t test and the sign-flip test apart, across "
             f"these {m} claims alone (m = {m}).", "",
             "- **Pending.** A family without a committed `docs/results/confirm/<family>/results.json` is *pending*. "
             f"Its claims still count in m: each enters both corrections as p = 1, so it takes the last ranks and "
             f"the claims that have run face the levels α/{m}, α/{m - 1}, … of all {m} (never fewer hypotheses "
             f"than listed; the positive-control gate uses α/{m} too). Holm's procedure is monotone in every p, so a "
             "rejection (*reproduced*, *opposite*) both tests made while claims are pending stands whatever they "
             "later give. A *ruled out* or *inconclusive* verdict may still become a rejection when they arrive (a "
             "smaller p ranked before it loosens its level), and a *t test only* one may change either way; those "
             "rows are final only when nothing is pending.",
             "- **Confirmed.** A claim counts as confirmed only when its confirmatory verdict is its exploratory one "
             "(the same kind; a *t test only* qualifier is not compared, since at 11 seeds or more the sign-flip "
             f"test can reach α/{m}). Any other confirmatory verdict leaves it *not confirmed*.",
             f"- **Status.** {len(confirm.run)} of {len(confirm.configs)} families re-run; of the {m} claims, "
             f"{confirmed} confirmed, {not_confirmed} not confirmed, {pending} pending.",
             "- **Power.** A re-run family's row gives the minimum detectable effect its fresh seeds reached (as in "
             f"the families table, at α and α/m = {alpha / max(1, m):.2g}); a pending family's gives the one its "
             "planned seeds should reach, from the exploratory SD of its claims' paired differences.", "",
             FAMILY_HEAD.format(alpha=alpha), "|---|---|---:|---|---|---|---|"]
    lines += _confirm_family_rows(confirm, families, alpha)
    return lines + ["", *_confirm_claim_lines(confirm), ""]


def _confirm_family_rows(confirm: Confirmation, families: list[Family], alpha: float) -> list[str]:
    """Each confirmation family's row: as the families table for a re-run one, planned seeds and the MDE they
    should reach for a pending one."""
    m, ran, lines = len(confirm.listed), {f.name: f for f in confirm.run}, []
    exploratory = {f.name: f for f in families}
    for name, cfg in confirm.configs.items():
        path = f"`{CONFIRM}/{name}.yaml`"
        if name in ran:
            link = f"[{CONFIRM_RESULTS}/{name}/results.md](results/confirm/{name}/results.md)" \
                if name in confirm.tables else f"`{CONFIRM_RESULTS}/{name}/results.json`"
            rows = [r for r in confirm.rows.values() if r["family"] is ran[name]]
            lines.append(_family_row(ran[name], rows, m, alpha, files=f"{name} · {path} · {link} · run"))
            continue
        claims = _claims(cfg)
        power = expected_power(exploratory[name], claims, len(cfg.seeds), m, alpha) if name in exploratory else []
        baseline = cfg.baseline or cfg.methods[0].name
        lines.append(f"| {name} · {path} · pending | {baseline} | {len(cfg.seeds)} planned "
                     f"| pending | pending | expected: {_power_cell(power)} | pending: {len(claims)} |")
    return lines


def _confirm_claim_lines(confirm: Confirmation) -> list[str]:
    """The re-run claims judged on their fresh seeds, as in the claims table."""
    if not confirm.rows:
        return [f"No confirmation family has committed results yet: all {len(confirm.listed)} claims are pending."]
    ordered = sorted(confirm.rows.values(), key=lambda r: _section_key(r["claim"].section))
    return ["The re-run claims on their fresh seeds (columns as in the claims table; Holm across the "
            f"{len(confirm.listed)} claims of `{CONFIRM_HOLM}`, the pending ones at p = 1):", "",
            CLAIM_HEAD, "|---|---|---|---|---|---|---|", *[_claim_row(row) for row in ordered]]


def _transfer_section(transfer: Transfer | None, rows: list[dict], confirm: Confirmation | None,
                      alpha: float) -> list[str]:
    """Each carried-over claim's testbed verdicts beside its real-model verdict, then the run families' rows."""
    if transfer is None:
        return []
    m = len(transfer.listed)
    exploratory = {claim_id(r["family"], r["claim"]): r for r in rows}
    files = ", ".join(f"`{TRANSFER}/{name}.yaml` (seeds {_range(cfg.seeds)}, {cfg.budget_text()})"
                      for name, cfg in transfer.configs.items())
    lines = ["## Transfer to a real pretrained model", "",
             f"The testbed claims below are carried over, unchanged (a mechanism only where the testbed's cannot "
             f"apply, with the reason in the row), to SmolLM2-135M-Instruct trained on reasoning-gym from its own "
             f"starting point, with the family's baseline and both controls: {files}. Its seeds, steps, claims and "
             f"the Holm family `{TRANSFER_HOLM}` ({m} claims, m = {m}) were committed before any of its runs; a pilot "
             "with other seeds sized it and enters no verdict. `rlvr findings` judges it with the same code and "
             "rules as the testbed (gates, both baseline arms, exact sign-flip, ruled out against inconclusive), "
             "Holm-corrected across its own claims; a family not run yet is *pending*, its claims counted in m at "
             "p = 1. The real-model verdict is about the model, task and budget of that file, not the testbed's.",
             "", "| method | paper's claim | testbed: family · exploratory verdict | testbed: confirmatory "
             "| real model: verdict · Δ (n) · p · Holm · flip Holm | why (real model) |",
             "|---|---|---|---|---|---|"]
    for key in sorted(transfer.testbed, key=lambda k: _section_key(exploratory[transfer.testbed[k]]["claim"].section)):
        lines.append(_transfer_row(key, exploratory[transfer.testbed[key]], transfer, confirm))
    lines += ["", f"Families: {len(transfer.run)} of {len(transfer.configs)} run."]
    for name, cfg in transfer.configs.items():
        family = next((f for f in transfer.run if f.name == name), None)
        if family is None:
            lines.append(f"- {name}: pending, {len(cfg.seeds)} seeds planned "
                         f"({', '.join(m.name for m in cfg.methods)}).")
            continue
        judged = [r for r in transfer.rows.values() if r["family"] is family]
        lines += ["", FAMILY_HEAD.format(alpha=alpha), "|---|---|---:|---|---|---|---|",
                  _family_row(family, judged, m, alpha, files=f"{name} · `{TRANSFER}/{name}.yaml` · "
                              f"`{TRANSFER_RESULTS}/{name}/results.json`"),
                  "", CLAIM_HEAD, "|---|---|---|---|---|---|---|",
                  *[_claim_row(r) for r in sorted(judged, key=lambda r: _section_key(r["claim"].section))]]
    return lines + [""]


def _transfer_row(key: str, testbed: dict, transfer: Transfer, confirm: Confirmation | None) -> str:
    claim = testbed["claim"]
    confirmatory = "—" if confirm is None else _confirm_cell(testbed, confirm)
    confirmatory = "— (undecided on the testbed: not re-run)" if confirmatory == "—" else confirmatory
    here = transfer.rows.get(key)
    if here is None:
        cell, why = "pending (not run yet)", "—"
    else:
        test = here["test"]
        stats = "no p" if test["p"] is None else \
            f"p {test['p']:.3g} · Holm {here['holm']['p_holm']:.3g} · flip Holm {here['flip_holm']['p_holm']:.3g}"
        cell, why = f"*{_verdict_text(here)}* · {_delta(here)} · {stats}", here["why"]
    mine = next(c for c in transfer.configs[key.split("/", 1)[0]].methods if c.name == claim.method).claim
    note = f" {mine.note}" if mine is not None and mine.note and mine.mechanism != claim.mechanism else ""
    return (f"| {claim.section} {claim.title} | {claim.paper} | {testbed['family'].name} · *{_verdict_text(testbed)}* "
            f"| {confirmatory} | {cell} | {why}{'.' if here is not None else ''}{note} |")


def _seed_text(confirm: Confirmation) -> str:
    """The confirmation's seeds: the range most files share, then each other file's ('200–211, length 200–215')."""
    ranges = {name: _range(cfg.seeds) for name, cfg in confirm.configs.items()}
    common = max(sorted(set(ranges.values())), key=list(ranges.values()).count) if ranges else ""
    return ", ".join([common] + [f"{name} {r}" for name, r in ranges.items() if r != common])


def _range(seeds: tuple[int, ...]) -> str:
    ordered = sorted(seeds)
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}–{ordered[-1]}"
    return ", ".join(str(s) for s in ordered)


def _problem_section(rows: list[dict]) -> list[str]:
    """Claims against the baseline paired problem by problem where both runs saved outcomes (beside
    the verdict, which stays the seed-level test)."""
    lines = ["## Problem-level pairing (beside the seed-level verdict)", ""]
    table = []
    for row in sorted(rows, key=lambda r: _section_key(r["claim"].section)):
        claim, family = row["claim"], row["family"]
        if claim.versus != "baseline":
            continue
        pair = pair_problems(family.records, claim.method, family.baseline, claim.metric, oriented(claim.metric))
        if pair and pair["seeds"]:
            share = "—" if pair["eval_share"] is None else f"{pair['eval_share']:.2f}"
            se = "—" if pair["se_eval"] is None else f"{pair['se_eval']:.3f}"
            table.append(f"| {claim.section} {claim.title} | {family.name} · {claim.metric} "
                         f"| {pair['b']} / {pair['c']} "
                         f"| {pair['p']:.3g} | {pair['mean']:+.3f} ± {se} | {share} |")
    if not table:
        return lines + ["No committed results.json records per-problem outcomes yet (its runs predate "
                        "`RUN/eval_outcomes.jsonl`), so no claim is paired problem by problem; a re-run family gets "
                        "this table from its results.", ""]
    return lines + ["b / c: problems (summed over seeds) where the method / the baseline did better; p: exact "
                    "McNemar of the sums (the models held fixed, so never the verdict); Δ ± SE: mean difference "
                    "and its evaluation-noise standard error; eval share: the part of the seed-level variance "
                    "that evaluation noise explains.", "",
                    "| method | family · metric | b / c | McNemar p | Δ ± SE (eval) | eval share |",
                    "|---|---|---|---:|---|---:|", *table, ""]


def _untested_lines(claims: list[Claim]) -> list[str]:
    if not claims:
        return []
    lines = ["## Claims no family measures", "", "| method | paper's claim | verdict | why |", "|---|---|---|---|"]
    for claim in sorted(claims, key=lambda c: _section_key(c.section)):
        lines.append(f"| {claim.section} {claim.title} | {claim.paper} | *not testable here* | {claim.not_testable} |")
    return lines + [""]


def _notes(root: Path) -> list[str]:
    path = root / NOTES
    if not path.exists():
        return []
    return ["---", "", f"*Hand-written notes below (from {NOTES}, not computed; they state no verdict).*", "",
            path.read_text().rstrip(), ""]


def _half(test: dict) -> float:
    from rlvr.compare.tdist import t_ppf
    return t_ppf(0.975, test["n"] - 1) * test["sd"] / test["n"] ** 0.5


def _section_key(section: str) -> tuple[int, ...]:
    digits = "".join(ch if ch.isdigit() or ch == "." else "" for ch in section).strip(".")
    return tuple(int(p) for p in digits.split(".") if p) or (99,)


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def run_findings(root: str | Path = ".", check: bool = False) -> int:
    """Write docs/findings.md (0), or with ``check`` compare it with the committed one (1 if it differs)."""
    root = Path(root)
    text = render(root)
    target = root / FINDINGS
    if check:
        if not target.exists() or target.read_text() != text:
            print(f"{target} differs from what the committed results give; run `rlvr findings` and commit it")
            return 1
        print(f"{target} matches the committed results")
        return 0
    target.write_text(text)
    print(f"wrote {target}")
    return 0
