"""Golden tests of the fresh-seed confirmation in `rlvr findings` (issue 47): the confirmatory column, pending
families, Holm with m fixed at the listed count, the errors when the listed and the filed claims differ, and the
descriptive line of a method against the arm it is built on (MMPO against Dr. GRPO).

Every number is chosen so its side of each threshold is known by hand: a method is the baseline plus a constant
plus ±0.001 alternating by seed, so its paired differences have that constant as mean, an SD of about 0.001 and
one sign on every seed (sign-flip p = 2/2ⁿ exactly).
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
import yaml

from rlvr.compare.claims import Claim
from rlvr.compare.findings import _base_arm_note, frozen_commit, render
from rlvr.compare.verdict_tests import holm
from rlvr.compare.verdicts import Family, check_holm_family, confirms, judge
from rlvr.train.config import ConfigError

ROOT = Path(__file__).resolve().parents[3]
BEFORE = 0.30
OLD, NEW = list(range(10)), list(range(200, 212))  # exploratory seeds, fresh seeds
CLAIMS = {"good": {"section": "§9.1", "title": "Good", "paper": "gains five points", "metric": "accuracy_after"},
          "flat": {"section": "§9.2", "title": "Flat", "paper": "gains too", "metric": "accuracy_after"},
          "late": {"section": "§9.3", "title": "Late", "paper": "gains as well", "metric": "accuracy_after"}}


def _base(seeds: list[int]) -> list[float]:
    return [0.40 + 0.01 * (i % 5) for i in range(len(seeds))]  # gains +0.10 to +0.14 over 0.30: all up


def _shift(seeds: list[int], by: float, wiggle: float = 0.001) -> list[float]:
    """The baseline plus ``by`` plus ±``wiggle`` alternating (−, +, −, ...): paired differences by ∓ wiggle."""
    return [b + by + (wiggle if i % 2 else -wiggle) for i, b in enumerate(_base(seeds))]


def _runs(seeds: list[int], arms: dict[str, list[float]]) -> dict:
    return {"runs": [{"method": m, "seed": s, "status": "done", "steps": 100, "accuracy_before": BEFORE,
                      "accuracy_after": a} for m, after in arms.items() for s, a in zip(seeds, after)]}


def _arms(seeds: list[int], **methods: list[float]) -> dict[str, list[float]]:
    harmed = [b - 0.06 + 0.001 * (i % 3) for i, b in enumerate(_base(seeds))]  # the positive control: −0.06
    return {"base": _base(seeds), "harmed": harmed, **methods}


def _file(claims: list[str], seeds: list[int], out_dir: str) -> dict:
    methods = {"base": {"preset": "grpo"}, "harmed": {"preset": "grpo", "role": "positive_control"}}
    methods.update({name: {"preset": "grpo", "claim": dict(CLAIMS[name])} for name in claims})
    return {"regime": "toy", "out_dir": out_dir, "baseline": "base", "budget": {"rollouts": 64}, "seeds": seeds,
            "base": {"run": {"eval_problems": 100}}, "methods": methods}


def _write(path: Path, data: dict | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else
                    (json.dumps(data) if path.suffix == ".json" else yaml.safe_dump(data, sort_keys=False)))


def _repo(root: Path, listed: list[str] | None = None, toy_run: bool = True) -> Path:
    """Exploratory families toy (good: +0.05, flat: ±0.002 around 0) and pend (late: +0.05) on seeds 0-9; their
    confirmation on seeds 200-211, toy run (good +0.05 again, flat now −0.05) and pend not run."""
    _write(root / "configs/holm_family.yaml", {"claims": ["toy/good", "toy/flat", "pend/late"]})
    _write(root / "configs/compare/toy.yaml", _file(["good", "flat"], OLD, "runs/compare/toy"))
    _write(root / "configs/compare/pend.yaml", _file(["late"], OLD, "runs/compare/pend"))
    _write(root / "docs/results/toy/results.json",
           _runs(OLD, _arms(OLD, good=_shift(OLD, 0.05), flat=_shift(OLD, 0.0, 0.002))))
    _write(root / "docs/results/pend/results.json", _runs(OLD, _arms(OLD, late=_shift(OLD, 0.05))))
    _write(root / "configs/confirm/holm_family.yaml", {"claims": listed or ["toy/good", "toy/flat", "pend/late"]})
    _write(root / "configs/confirm/FROZEN", "# the freeze\nabc1234\n")
    _write(root / "configs/confirm/toy.yaml", _file(["good", "flat"], NEW, "runs/confirm/toy"))
    _write(root / "configs/confirm/pend.yaml", _file(["late"], NEW, "runs/confirm/pend"))
    if toy_run:
        _write(root / "docs/results/confirm/toy/results.json",
               _runs(NEW, _arms(NEW, good=_shift(NEW, 0.05), flat=_shift(NEW, -0.05))))
    return root


def _row(text: str, name: str) -> str:
    """The claims table's row of a claim (the first row whose first cell is it)."""
    return next(line for line in text.splitlines() if line.startswith(f"| {name} |"))


# --- the confirmatory column -----------------------------------------------------------------------

def test_the_claims_table_shows_each_confirmatory_verdict_beside_the_exploratory_one(tmp_path):
    text = render(_repo(tmp_path))
    assert "| verdict | confirmatory (fresh seeds 200–211) | why |" in text
    # good: +0.05 on every seed both times (SD 0.00104 over 12 seeds: ± 2.201 · 0.00104 / √12 = ± 0.0007)
    assert "| *reproduced* | *reproduced*, confirmed · +0.050 ± 0.001 (n = 12) · p " in _row(text, "§9.1 Good")
    # flat: 0 ± 0.002 at first (interval ⊂ ±0.0015, below 0.25 × the gain of 0.12: ruled out), now −0.05
    assert "| *ruled out* | *opposite*, not confirmed · -0.050 ± 0.001 (n = 12) · p " in _row(text, "§9.2 Flat")
    assert "| *reproduced* | pending (not re-run yet) | t p = " in _row(text, "§9.3 Late")
    assert "Re-run on fresh seeds (3): confirmed 1, not confirmed 1, pending 1." in text
    assert "So far 1 of 2 families have been re-run: confirmed 1, not confirmed 1, pending 1." in text


def test_the_confirmation_section_names_the_freeze_the_status_and_the_power(tmp_path):
    text = render(_repo(tmp_path))
    section = text[text.index("## Confirmation on fresh seeds"):]
    assert "frozen in commit abc1234 (named in `configs/confirm/FROZEN`)" in section
    assert ("| toy · `configs/confirm/toy.yaml` · `docs/results/confirm/toy/results.json` · run "
            "| base | 12 |") in section
    # pending: its 12 planned seeds and, from the exploratory SD of late's differences (0.00105), what they reach
    assert "| pend · `configs/confirm/pend.yaml` · pending | base | 12 planned | pending | pending | expected: " \
           "accuracy_after: 0.001, " in section
    assert "the levels α/3, α/2, … of all 3" in section
    assert "| §9.2 Flat |" in section and "*opposite*" in _row(section, "§9.2 Flat")


def test_with_no_confirmatory_results_every_listed_claim_is_pending(tmp_path):
    text = render(_repo(tmp_path, toy_run=False))
    assert "Re-run on fresh seeds (3): confirmed 0, not confirmed 0, pending 3." in text
    assert "| *reproduced* | pending (not re-run yet) |" in _row(text, "§9.1 Good")
    assert "No confirmation family has committed results yet: all 3 claims are pending." in text
    assert "No family has been re-run yet, so nothing here is confirmatory yet (3 claims pending)." in text


def test_confirmed_means_the_same_decided_kind():
    assert confirms({"verdict": "opposite", "qualifier": "t test only"}, {"verdict": "opposite", "qualifier": ""})
    assert not confirms({"verdict": "ruled out"}, {"verdict": "inconclusive"})
    assert not confirms({"verdict": "inconclusive"}, {"verdict": "inconclusive"})  # nothing decided to confirm


# --- Holm with the pending claims counted ---------------------------------------------------------

def _eight_seed_family() -> Family:
    seeds = list(range(8))
    arms = _arms(seeds, a=_shift(seeds, 0.05))
    records = _runs(seeds, arms)["runs"]
    roles = {"base": "baseline", "harmed": "positive_control", "a": "method"}
    claim = Claim(method="a", section="§9.9", title="A", paper="synthetic", metric="accuracy_after")
    return Family(name="toy", baseline="base", claims=(claim,), roles=roles, records=records, seeds=tuple(seeds))


def test_pending_claims_keep_m_at_the_listed_count():
    # 8 seeds, all +0.05: the sign-flip p is its floor 2/2⁸ = 0.0078. Alone (m = 1) that is under α = 0.05;
    # with 14 claims pending (m = 15) the first Holm level is 0.05/15 = 0.0033, under the floor: t test only.
    pending = [f"later/c{i}" for i in range(14)]
    alone = judge([_eight_seed_family()], holm_family=["toy/a"])[0]
    assert (alone["verdict"], alone["qualifier"], alone["flip_holm"]["m"]) == ("reproduced", "", 1)
    waiting = judge([_eight_seed_family()], holm_family=["toy/a", *pending], pending=pending)[0]
    assert waiting["holm"]["m"] == waiting["flip_holm"]["m"] == 15
    assert waiting["holm"]["level"] == pytest.approx(0.05 / 15)
    assert waiting["flip_holm"]["p_holm"] == pytest.approx(15 * 2 / 2 ** 8)
    assert (waiting["verdict"], waiting["qualifier"]) == ("reproduced", "t test only")


def test_the_listed_claims_must_be_the_tested_and_the_pending_ones():
    fam = _eight_seed_family()
    with pytest.raises(ConfigError, match=r"listed in f\.yaml but not a claim with a p-value or pending: \['x/y'\]"):
        judge([fam], holm_family=["toy/a", "later/c0", "x/y"], where="f.yaml", pending=["later/c0"])
    with pytest.raises(ConfigError, match=r"claims with a p-value or pending that f\.yaml does not list"):
        check_holm_family(judge([fam]), ["toy/a"], "f.yaml", pending=["later/c0"])


def test_a_rejection_made_with_claims_pending_stands_whatever_they_later_give():
    # Holm is monotone: lowering any p (a pending 1 becoming its real value) never undoes a rejection.
    rng = random.Random(47)
    for _ in range(300):
        tested = {i: rng.choice([rng.uniform(0, 0.01), rng.uniform(0, 1)]) for i in range(4)}
        later = {f"p{i}": rng.uniform(0, 1) ** 3 for i in range(rng.randint(1, 11))}
        before = holm({**tested, **{k: 1.0 for k in later}})
        after = holm({**tested, **later})
        assert all(after[i]["rejected"] for i in tested if before[i]["rejected"])
        assert all(after[i]["p_holm"] <= before[i]["p_holm"] + 1e-15 for i in tested)


# --- the listed claims and the confirmation files must agree ---------------------------------------

def test_a_claim_the_confirmatory_holm_family_does_not_list_stops_findings(tmp_path):
    with pytest.raises(ConfigError, match=r"claim \['pend/late'\], which configs/confirm/holm_family\.yaml does "
                                          r"not list"):
        render(_repo(tmp_path, listed=["toy/good", "toy/flat"]))


def test_a_listed_claim_no_confirmation_file_claims_stops_findings(tmp_path):
    with pytest.raises(ConfigError, match=r"lists \['toy/extra'\], which no file of configs/confirm/\*\.yaml claims"):
        render(_repo(tmp_path, listed=["toy/good", "toy/flat", "pend/late", "toy/extra"]))


def test_a_confirmation_must_rerun_the_claim_unchanged(tmp_path):
    root = _repo(tmp_path)
    edited = _file(["good", "flat"], NEW, "runs/confirm/toy")
    edited["methods"]["flat"]["claim"]["direction"] = "not_worse"
    _write(root / "configs/confirm/toy.yaml", edited)
    with pytest.raises(ConfigError, match=r"the claims \['toy/flat'\] are not those configs/compare/ registered"):
        render(root)


def test_the_frozen_commit_is_read_from_a_committed_file(tmp_path):
    root = _repo(tmp_path)
    assert frozen_commit(root) == "abc1234"
    (root / "configs/confirm/FROZEN").write_text("# no commit here\n")
    with pytest.raises(ConfigError, match="FROZEN must name"):
        render(root)


def test_the_committed_freeze_is_the_commit_that_added_the_confirmatory_holm_family():
    try:
        added = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--",
                                "configs/confirm/holm_family.yaml"], cwd=ROOT, capture_output=True, text=True,
                               timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        added = []
    if not added:
        pytest.skip("no git history here (a shallow or exported copy)")
    assert added[-1].startswith(frozen_commit(ROOT))  # the first commit that added it


# --- the descriptive line against the arm a method is built on --------------------------------------

def _length(with_base: bool) -> tuple[Family, Claim]:
    seeds = [0, 1, 2, 3]
    arms = {"grpo": [0.40] * 4, "mmpo": [0.43, 0.43, 0.43, 0.43]}
    if with_base:  # mmpo − dr_grpo: +0.01, +0.03, +0.01, +0.03
        arms["dr_grpo"] = [0.42, 0.40, 0.42, 0.40]
    claim = Claim(method="mmpo", section="§2.15", title="MMPO", paper="synthetic", metric="accuracy_after")
    family = Family(name="length", baseline="grpo", claims=(claim,), records=_runs(seeds, arms)["runs"],
                    roles={"grpo": "baseline", "mmpo": "method", "dr_grpo": "method"}, seeds=tuple(seeds))
    return family, claim


def test_mmpo_is_described_against_dr_grpo_outside_the_holm_family():
    # mean +0.020, SD √(4 · 0.0001 / 3) = 0.01155, half-width 3.182 · 0.01155 / 2 = 0.0184; t = 2√3 with 3 df:
    # two-sided p = 1 − (2/π)(arctan 2 + 2/5) = 0.0405; the exact sign-flip p of four positive values 2/16.
    family, claim = _length(with_base=True)
    assert _base_arm_note(family, claim) == (
        "Against dr_grpo, the arm mmpo is built on (descriptive, outside the Holm family): accuracy_after "
        "+0.020 ± 0.018 (n = 4), t p = 0.0405, sign-flip p = 0.125.")
    family, claim = _length(with_base=False)
    assert _base_arm_note(family, claim).endswith("the dr_grpo arm has not run yet.")
    assert _base_arm_note(family, claim, arms={}) == ""


def test_the_committed_mmpo_row_says_where_its_dr_grpo_arm_stands():
    runs = json.loads((ROOT / "docs/results/length/results.json").read_text())["runs"]
    ran = any(r["method"] == "dr_grpo" and r["status"] == "done" for r in runs)
    row = _row((ROOT / "docs/findings.md").read_text(), "§2.15 MMPO")
    assert ("pass@4 +" in row or "pass@4 -" in row) if ran else "the dr_grpo arm has not run yet." in row
