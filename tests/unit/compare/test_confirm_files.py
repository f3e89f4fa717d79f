"""The confirmation files (configs/confirm/) re-run the exploratory claims unchanged on fresh seeds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CONFIRM = ROOT / "configs" / "confirm"
FILES = sorted(p for p in CONFIRM.glob("*.yaml") if p.name != "holm_family.yaml")
SETTINGS = ("regime", "base_config", "base", "budget", "warm_cache", "baseline")


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_a_confirmation_copies_its_family_and_uses_seeds_never_run(path):
    mine, theirs = _load(path), _load(ROOT / "configs" / "compare" / path.name)
    for key in SETTINGS:  # the same regime, budget and evaluation: only the seeds (and the run folder) change
        assert mine.get(key) == theirs.get(key), (path.name, key)
    for name, spec in mine["methods"].items():  # each arm exactly as pre-registered, claim and all
        assert spec == theirs["methods"][name], (path.name, name)
    roles = {spec.get("role") for spec in mine["methods"].values()}
    assert {"negative_control", "positive_control"} <= roles  # both controls re-run too
    every_old_seed = {s for p in (ROOT / "configs" / "compare").glob("*.yaml") for s in _load(p).get("seeds", [])}
    assert not set(mine["seeds"]) & every_old_seed
    assert len(mine["seeds"]) >= 11  # 2/2^11 < 0.05/15: the sign-flip test can reach the strictest Holm level
    assert str(mine["out_dir"]).startswith("runs/confirm/")


def test_the_confirmatory_holm_family_is_every_confirmed_claim():
    listed = _load(CONFIRM / "holm_family.yaml")["claims"]
    claimed = [f"{p.stem}/{name}" for p in FILES for name, spec in _load(p)["methods"].items() if "claim" in spec]
    assert sorted(listed) == sorted(claimed) and len(set(listed)) == len(listed)
