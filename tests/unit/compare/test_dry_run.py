"""The text of `rlvr compare --dry-run` (rlvr.compare.dry_run) from a plan made by hand."""

from __future__ import annotations

from rlvr.compare.dry_run import dry_run_text, seed_ranges


def test_seed_ranges_and_the_text_of_a_plan():
    assert seed_ranges([7, 0, 1, 2, 5, 8]) == "0-2, 5, 7-8" and seed_ranges([]) == ""
    plan = {"warm_root": "w", "warm": {}, "runs": [
        {"method": "grpo", "seed": 0, "action": "reuse", "changed": []},
        {"method": "dr_grpo", "seed": 0, "action": "archive", "changed": ["algorithm.lr", "run.steps"]}]}
    assert dry_run_text(plan).splitlines() == [
        "runs (2): 0 to start, 0 to resume from a checkpoint, 1 to set aside and start again, 1 finished (reused)",
        "  grpo     reuse 0",
        "  dr_grpo  archive 0",
        "  dr_grpo seed 0 changed: algorithm.lr, run.steps",
    ]


def test_the_warm_start_line_counts_cached_and_to_build():
    plan = {"warm_root": "runs/warm/abc", "warm": {0: "cached", 1: "build", 2: "build"},
            "runs": [{"method": "grpo", "seed": s, "action": "start", "changed": []} for s in (0, 1, 2)]}
    assert dry_run_text(plan).splitlines()[:3] == [
        "warm starts in runs/warm/abc: 1 cached (0), 2 to build (1-2)",
        "runs (3): 3 to start, 0 to resume from a checkpoint, 0 to set aside and start again, 0 finished (reused)",
        "  grpo  start 0-2",
    ]
