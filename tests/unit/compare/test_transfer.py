"""Golden tests of the transfer table in `rlvr findings` (issue 47): testbed claims carried over to a real
pretrained model (configs/transfer/), judged by the same code under their own Holm family, each row putting the
testbed's exploratory and confirmatory verdicts beside the real-model one; pending until its results exist.

The synthetic repository is test_confirmation's (toy: good +0.05, flat ±0.002 on seeds 0-9; its confirmation on
200-211), with a transfer file on seeds 300-311 carrying good and flat over.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rlvr.compare.findings import render
from rlvr.train.config import ConfigError
from tests.unit.compare.test_confirmation import CLAIMS, _arms, _file, _repo, _row, _runs, _shift, _write

REAL = list(range(300, 312))  # the transfer family's seeds


def _transfer(root: Path, run: bool = True, claims: dict | None = None, listed: list[str] | None = None) -> Path:
    """good and flat carried over; when run, good is +0.05 again (reproduced) and flat −0.05 (opposite)."""
    _repo(root)
    data = _file(["good", "flat"], REAL, "runs/transfer/real")
    data["methods"]["base_rl"] = {"preset": "grpo", "role": "negative_control", "rl_seed_offset": 1000}
    for name, spec in (claims or {}).items():
        data["methods"][name]["claim"] = spec
    _write(root / "configs/transfer/real.yaml", data)
    _write(root / "configs/transfer/real_pilot.yaml",  # a pilot: no claims, judged by nothing
           {**_file([], [900, 901], "runs/transfer/real_pilot")})
    _write(root / "configs/transfer/holm_family.yaml", {"claims": listed or ["real/good", "real/flat"]})
    if run:
        arms = _arms(REAL, good=_shift(REAL, 0.05), flat=_shift(REAL, -0.05))
        arms["base_rl"] = _shift(REAL, 0.0, 0.0005)
        runs = _runs(REAL, arms)
        for rec in runs["runs"]:
            rec["role"] = {"base": "baseline", "harmed": "positive_control", "base_rl": "negative_control"}.get(
                rec["method"], "method")
        _write(root / "docs/results/transfer/real/results.json", runs)
    return root


def _section(text: str) -> str:
    start = text.index("## Transfer to a real pretrained model")
    return text[start:text.index("\n## ", start + 1)]


def test_the_transfer_table_puts_the_testbed_verdicts_beside_the_real_model_one(tmp_path):
    section = _section(render(_transfer(tmp_path)))
    assert ("| method | paper's claim | testbed: family · exploratory verdict | testbed: confirmatory "
            "| real model: verdict · Δ (n) · p · Holm · flip Holm | why (real model) |") in section
    # good: reproduced on the testbed, confirmed on its fresh seeds, reproduced on the real model
    good = _row(section, "§9.1 Good")
    assert "| toy · *reproduced* | *reproduced*, confirmed · +0.050 ± 0.001 (n = 12) · p " in good
    assert "| *reproduced* · +0.050 ± 0.001 (n = 12) · p " in good
    # flat: ruled out on the testbed, opposite on its fresh seeds and on the real model (not reproduced)
    flat = _row(section, "§9.2 Flat")
    assert "| toy · *ruled out* | *opposite*, not confirmed · -0.050 ± 0.001 (n = 12)" in flat
    assert "| *opposite* · -0.050 ± 0.001 (n = 12) · p " in flat
    assert "`configs/transfer/holm_family.yaml` (2 claims, m = 2)" in section
    assert "`configs/transfer/real.yaml` (seeds 300–311, 64 sampled completions per run" in section
    assert "real_pilot" not in section  # a pilot has no claims and no row
    assert "Families: 1 of 1 run." in section
    assert "| real · `configs/transfer/real.yaml` · `docs/results/transfer/real/results.json` | base | 12 |" in section


def test_a_transfer_family_not_run_yet_is_pending(tmp_path):
    text = render(_transfer(tmp_path, run=False))
    section = _section(text)
    assert "| pending (not run yet) | — |" in _row(section, "§9.1 Good")
    assert "| pending (not run yet) | — |" in _row(section, "§9.2 Flat")
    assert "- real: pending, 12 seeds planned (base, harmed, good, flat, base_rl)." in section
    # the testbed's own tables are untouched by the transfer
    assert "Re-run on fresh seeds (3): confirmed 1, not confirmed 1, pending 1." in text


def test_the_transfer_holm_family_is_its_own(tmp_path):
    """Holm across the transfer's 2 claims: good's t p is doubled at most, not corrected across the testbed's."""
    section = _section(render(_transfer(tmp_path)))
    good = _row(section, "§9.1 Good")
    p, holm = (float(good.split(f"{word} ")[1].split(" ")[0]) for word in ("· p", "Holm"))
    assert holm == pytest.approx(2 * p, rel=1e-2) or holm == pytest.approx(p, rel=1e-2)


def test_a_transfer_claim_must_be_its_testbed_claim_unchanged(tmp_path):
    changed = {"good": {**CLAIMS["good"], "metric": "pass@4"}}
    with pytest.raises(ConfigError, match=r"real/good is not toy/good as configs/compare/ registered it"):
        render(_transfer(tmp_path, claims=changed))


def test_a_transfer_claim_names_its_testbed_claim_by_method_and_section(tmp_path):
    moved = {"good": {**CLAIMS["good"], "section": "§9.9"}}
    with pytest.raises(ConfigError, match=r"exactly one testbed claim of method 'good' and section §9.9; found none"):
        render(_transfer(tmp_path, claims=moved))


def test_a_changed_mechanism_needs_its_reason(tmp_path):
    gate = {"metric": "final_response_length", "vs_baseline": "lower"}
    with pytest.raises(ConfigError, match="changes toy/good's mechanism without a note"):
        render(_transfer(tmp_path, claims={"good": {**CLAIMS["good"], "mechanism": gate}}))
    why = "the testbed's gate is not logged on this model"
    section = _section(render(_transfer(tmp_path, claims={"good": {**CLAIMS["good"], "mechanism": gate,
                                                                   "note": why}})))
    assert why in _row(section, "§9.1 Good")


def test_the_transfer_holm_family_must_list_exactly_its_claims(tmp_path):
    with pytest.raises(ConfigError, match=r"configs/transfer/holm_family.yaml lists \['real/late'\]"):
        render(_transfer(tmp_path, listed=["real/good", "real/flat", "real/late"]))


def test_a_comparison_on_a_missing_checkpoint_stops_before_any_run(tmp_path):
    from rlvr.compare.config import load_compare
    data = _file([], [0, 1], str(tmp_path / "runs"))
    data["base"] = {"model": {"path": str(tmp_path / "nothere")}, "warm_start": {"steps": 0},
                    "run": {"eval_problems": 10}}
    _write(tmp_path / "real.yaml", data)
    with pytest.raises(ConfigError, match=r"method 'base': model.path .*nothere does not exist .*rlvr model get"):
        load_compare(tmp_path / "real.yaml")
    assert load_compare(tmp_path / "real.yaml", build=False).base["model"]["path"]  # findings read it as it is
