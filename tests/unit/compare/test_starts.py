"""rlvr.compare.starts: the runs of a seed that share a warm start report equal before-RL numbers, and the
report names any that do not (a warm start rebuilt elsewhere would pair runs from different models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.compare.config import load_compare
from rlvr.compare.report import build_report
from rlvr.compare.starts import before_numbers, differing_starts

ROOT = Path(__file__).resolve().parents[3]


def _rec(method: str, seed: int, acc: float, pass4: float | None = 0.5, status: str = "done") -> dict:
    return {"method": method, "seed": seed, "status": status, "accuracy_before": acc, "accuracy_after": acc + 0.1,
            "pass_at_k_before": {} if pass4 is None else {"pass@4": pass4}, "maj_at_k_before": {},
            "subsets_before": {}}


def test_equal_starts_give_nothing_and_missing_names_are_not_compared():
    records = [_rec("grpo", 0, 0.32), _rec("dr_grpo", 0, 0.32, pass4=None), _rec("mmpo", 0, 0.32),
               _rec("grpo", 1, 0.30), _rec("mmpo", 1, 0.25, status="failed")]
    assert differing_starts(records) == []
    assert before_numbers(records[0]) == {"accuracy_before": 0.32, "pass@4": 0.5}


def test_a_run_that_started_elsewhere_is_named_with_its_numbers():
    records = [_rec("grpo", 0, 0.32), _rec("dr_grpo", 0, 0.32, pass4=0.51), _rec("grpo", 1, 0.30),
               _rec("dr_grpo", 1, 0.31)]
    assert differing_starts(records) == [
        {"seed": 0, "reference": "grpo", "differ": {"dr_grpo": {"pass@4": [0.51, 0.5]}}},
        {"seed": 1, "reference": "grpo", "differ": {"dr_grpo": {"accuracy_before": [0.31, 0.30]}}},
    ]


@pytest.mark.parametrize("shared", [True, False])
def test_the_report_warns_only_for_a_shared_start(tmp_path, shared):
    runs = [{**_rec(m, s, 0.3 + 0.01 * (m == "dr_grpo" and s == 1)), "stored_from": "x"}
            for m in ("grpo", "dr_grpo") for s in (0, 1)]
    results = build_report(tmp_path, runs, {"steps": 1}, shared_start=shared)
    text = (tmp_path / "results.md").read_text()
    if shared:
        assert [d["seed"] for d in results["differing_starts"]] == [1]
        assert "did not start alike" in text
        assert "- seed 1: dr_grpo against grpo: accuracy_before 0.3100 vs 0.3000" in text
    else:
        assert "differing_starts" not in results and "did not start alike" not in text


def _committed() -> list[tuple[Path, Path]]:
    places = [("configs/compare", "docs/results"), ("configs/confirm", "docs/results/confirm"),
              ("configs/transfer", "docs/results/transfer")]
    return [(cfg, ROOT / out / cfg.stem / "results.json") for folder, out in places
            for cfg in sorted((ROOT / folder).glob("*.yaml")) if (ROOT / out / cfg.stem / "results.json").exists()]


def test_every_committed_family_with_a_shared_start_started_alike():
    checked = 0
    for cfg_path, results in _committed():
        if not load_compare(cfg_path, build=False).shared_warm_start:
            continue
        assert differing_starts(json.loads(results.read_text())["runs"]) == [], results
        checked += 1
    assert checked >= 15  # the testbed families, their confirmations and the transfer
