"""A committed results.json stands in for runs not on this machine (rlvr.compare.stored): an arm added
later is paired against the stored arms exactly as if every run were here."""

from __future__ import annotations

import json

import pytest

from rlvr.compare.report import build_report
from rlvr.compare.stored import stand_in
from rlvr.train.config import ConfigError
from tests.unit.compare.test_compare_report import _fake_run

BASE = [0.30, 0.40, 0.20]
DIFFS = [0.10, 0.05, 0.15]


def _runs(root, methods):
    runs = []
    for seed, (b, d) in enumerate(zip(BASE, DIFFS)):
        for method, acc in (("grpo", b), ("new", b + d)):
            folder = root / "runs" / method / f"seed{seed}"
            if method in methods:
                _fake_run(folder, acc_before=0.1, acc_after=acc, passk={"pass@1": acc, "pass@4": acc + 0.2},
                          maj=acc, reward_tail=[acc, acc], entropy=1.0, length=10.0, rollouts=320, seconds=10.0)
            runs.append({"method": method, "seed": seed, "rl_seed": seed, "role": "baseline" if method == "grpo"
                         else "method", "run_dir": str(folder),
                         "status": "done" if method in methods else "missing"})
    return runs


@pytest.mark.slow  # over ~2 s (three reports with plots): not in make test-fast
def test_stored_records_pair_like_runs_on_this_machine(tmp_path):
    whole = build_report(tmp_path / "whole", _runs(tmp_path / "whole", {"grpo", "new"}), {"rollouts": 320},
                         baseline="grpo")
    first = build_report(tmp_path / "first", _runs(tmp_path / "first", {"grpo"}), {"rollouts": 320},
                         baseline="grpo")  # the committed file: the baseline arm only
    committed = tmp_path / "results.json"
    committed.write_text((tmp_path / "first" / "results.json").read_text())
    later = stand_in(_runs(tmp_path / "later", {"new"}), committed)  # only the new arm's folders are here
    assert [r.get("stored_from") is not None for r in later] == [True, False] * 3
    merged = build_report(tmp_path / "later", later, {"rollouts": 320}, baseline="grpo")
    assert first["paired"]["methods"]["new"]["accuracy_after"]["n"] == 0  # nothing to pair before
    assert merged["paired"]["methods"] == whole["paired"]["methods"]  # the same statistics, every metric
    assert merged["paired"]["methods"]["new"]["accuracy_after"]["mean"] == pytest.approx(0.10)
    assert all(r["status"] == "done" for r in merged["runs"])


def test_a_stored_record_of_another_plan_is_refused(tmp_path):
    committed = tmp_path / "results.json"
    committed.write_text(json.dumps({"runs": [{"method": "grpo", "seed": 0, "rl_seed": 1000, "role": "baseline",
                                              "status": "done", "accuracy_after": 0.3}]}))
    runs = [{"method": "grpo", "seed": 0, "rl_seed": 0, "role": "baseline", "run_dir": "x", "status": "missing"}]
    with pytest.raises(ConfigError, match=r"grpo:0 differs .* rl_seed 1000 vs 0"):
        stand_in(runs, committed)
    kept = stand_in([{**runs[0], "seed": 1}], committed)  # no stored record of seed 1: stays missing
    assert kept[0]["status"] == "missing" and "stored_from" not in kept[0]
    with pytest.raises(ConfigError, match="not a comparison's results.json"):
        stand_in(runs, tmp_path / "absent.json")
