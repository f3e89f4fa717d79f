"""The committed transfer family (configs/transfer/smollm2.yaml): fresh seeds, both controls, a real model, its own
Holm family, and no run shared with its pilot."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
TRANSFER = ROOT / "configs" / "transfer"


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def test_the_smollm2_family_uses_fresh_seeds_both_controls_and_its_own_holm_family():
    mine, pilot = _load(TRANSFER / "smollm2.yaml"), _load(TRANSFER / "smollm2_pilot.yaml")
    used = {s for folder in ("compare", "confirm") for p in (ROOT / "configs" / folder).glob("*.yaml")
            for s in _load(p).get("seeds", []) if isinstance(s, int)}
    used |= {0, 1, 2, 3} | set(pilot["seeds"])  # the SmolLM2 recipe's pilot and seeds, this family's pilot
    assert not set(mine["seeds"]) & used
    assert {"negative_control", "positive_control"} <= {spec.get("role") for spec in mine["methods"].values()}
    assert mine["base"]["model"]["path"] and mine["base"]["task"]["name"] == "reasoning_gym"
    assert mine["base"]["warm_start"]["steps"] == 0  # trained from the pretrained model itself
    assert mine["out_dir"] != pilot["out_dir"] and not any("claim" in spec for spec in pilot["methods"].values())
    for key in ("base", "budget"):  # the pilot ran what the family runs
        assert pilot[key] == mine[key], key
    listed = _load(TRANSFER / "holm_family.yaml")["claims"]
    assert sorted(listed) == sorted(f"smollm2/{n}" for n, s in mine["methods"].items() if "claim" in s)
