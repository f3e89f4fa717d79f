"""Paired statistics in comparisons: per-seed differences from a baseline, t interval, sign-flip p."""

from __future__ import annotations

import json

import pytest

from rlvr.compare.report import build_report
from rlvr.compare.stats import paired_difference, sign_flip_p
from tests.unit.compare.test_compare_report import _fake_run

BASE_ACC = [0.30, 0.40, 0.20, 0.50, 0.35]
DIFFS = [0.10, 0.05, 0.15, -0.05, 0.10]


def test_sign_flip_p_golden():
    # |d| = .10 .05 .15 .05 .10 (sum .45); flipping a subset F gives .45 − 2·ΣF; |·| ≥ .35 needs
    # ΣF ≤ .05 ({}, {.05}, {.05'}) or ΣF ≥ .40 (their complements): 6 of 32 assignments.
    assert sign_flip_p(DIFFS) == pytest.approx(6 / 32)
    assert sign_flip_p([0.2] * 5) == pytest.approx(2 / 32)  # the floor with 5 seeds
    assert sign_flip_p([0.0, 0.0]) == 1.0
    big = [0.1] * 20  # beyond exact enumeration: Monte Carlo, 2/2^20 in truth
    assert sign_flip_p(big, samples=2000) < 0.002


def test_paired_difference_golden():
    base = dict(enumerate(BASE_ACC))
    method = {s: b + d for s, (b, d) in enumerate(zip(BASE_ACC, DIFFS))}
    out = paired_difference(method, base)
    # mean .07; deviations .03 −.02 .08 −.12 .03 → Σ² = .023, s² = .00575, s = .0758288;
    # ci = t(.975, 4) · s / √5 = 2.776 · .0339116 = .094139
    assert out["mean"] == pytest.approx(0.07) and out["std"] == pytest.approx(0.0758288, abs=1e-7)
    assert out["ci"] == pytest.approx(0.094139, abs=1e-6)
    assert out["p"] == pytest.approx(0.1875) and (out["wins"], out["ties"], out["losses"]) == (4, 0, 1)
    lower = paired_difference(method, base, higher_is_better=False)  # cost metrics: a rise is a loss
    assert (lower["wins"], lower["losses"]) == (1, 4)
    missing = paired_difference({0: 0.5, 1: None, 2: 0.4}, {0: 0.4, 1: 0.3})  # only seed 0 pairs
    assert missing["n"] == 1 and missing["ci"] is None and missing["p"] == 1.0


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("paired")
    runs = []
    for seed, (b, d) in enumerate(zip(BASE_ACC, DIFFS)):
        for method, acc in (("grpo", b), ("new", b + d)):
            folder = out / "runs" / method / f"seed{seed}"
            _fake_run(folder, acc_before=0.1, acc_after=acc, passk={"pass@1": acc, "pass@4": acc + 0.2},
                      maj=acc, reward_tail=[acc, acc], entropy=1.0, length=10.0, rollouts=320,
                      seconds=10.0 if method == "grpo" else 8.0 + 0.5 * seed)
            runs.append({"method": method, "seed": seed, "status": "done", "run_dir": str(folder)})
    return out, build_report(out, runs, {"kind": "steps", "value": 20}, baseline="grpo")


@pytest.mark.slow  # over ~2 s: not in make test-fast
def test_report_pairs_every_seed_against_the_baseline(report):
    out, results = report
    paired = json.loads((out / "results.json").read_text())["paired"]
    assert paired["baseline"] == "grpo" and list(paired["methods"]) == ["new"]
    acc = paired["methods"]["new"]["accuracy_after"]
    assert acc["n"] == 5 and acc["mean"] == pytest.approx(0.07) and acc["ci"] == pytest.approx(0.094139, abs=1e-6)
    assert acc["p"] == pytest.approx(0.1875)
    assert paired["methods"]["new"]["pass@4"]["mean"] == pytest.approx(0.07)  # shifted by the same 0.2
    assert paired["metrics"] == ["accuracy_after", "final_reward", "pass@4", "seconds"]
    # seconds: diffs -2, -1.5, -1, -0.5, 0 (lower is better): mean -1, sd 0.7906, /√5, × t(4) 2.776 → ±0.9815;
    # (t table 2.776); four wins, one tie; the tie's zero difference leaves 2^4 distinct sign patterns, 2 of them as extreme
    sec = paired["methods"]["new"]["seconds"]
    assert sec["mean"] == pytest.approx(-1.0) and sec["ci"] == pytest.approx(0.98146, abs=1e-5)
    assert (sec["wins"], sec["ties"], sec["losses"]) == (4, 1, 0) and sec["p"] == pytest.approx(0.125)


@pytest.mark.slow  # over ~2 s: not in make test-fast
def test_results_md_leads_with_the_paired_table(report):
    out, _ = report
    md = (out / "results.md").read_text()
    assert md.index("## Paired differences from grpo") < md.index("## Per method")
    row = next(line for line in md.splitlines() if line.startswith("| new |"))
    assert "+0.070 ± 0.094 (n=5) | 0.188 | 4/0/1" in row
    assert row.rstrip().endswith("-1.0 ± 1.0 (n=5) | 0.125 | 4/1/0 |") and "Δ RL seconds" in md
    assert (out / "paired_differences.png").stat().st_size > 1000


@pytest.mark.slow  # over ~2 s: not in make test-fast
def test_unknown_baseline_is_an_error(report, tmp_path):
    out, results = report
    with pytest.raises(ValueError, match="baseline 'nope'"):
        build_report(tmp_path, [{"method": "grpo", "seed": 0, "status": "failed", "run_dir": str(tmp_path)}],
                     {"steps": 1}, baseline="nope")


def test_comparison_file_baseline_and_default_seeds(tmp_path):
    from rlvr.compare.config import DEFAULT_EVAL_PROBLEMS, load_compare
    from rlvr.train.config import ConfigError

    path = tmp_path / "cmp.yaml"
    path.write_text("methods: {grpo: {preset: grpo}, dapo: {preset: dapo}}\nbudget: {steps: 2}\nbaseline: dapo\n")
    cfg = load_compare(path)
    assert cfg.baseline == "dapo" and cfg.seeds == tuple(range(10))  # a new file: 10 seeds
    assert cfg.run_config(cfg.methods[0], 0).run.eval_problems == DEFAULT_EVAL_PROBLEMS == 1000
    path.write_text("methods: {grpo: {preset: grpo}}\nbudget: {steps: 2}\nseeds: [3, 4]\n"
                    "base: {run: {eval_problems: 100}}\n")
    cfg = load_compare(path)  # files that set them keep their seeds and evaluation size
    assert cfg.seeds == (3, 4) and cfg.run_config(cfg.methods[0], 3).run.eval_problems == 100
    path.write_text("methods: {grpo: {preset: grpo}}\nbudget: {steps: 2}\nbaseline: gspo\n")
    with pytest.raises(ConfigError, match="baseline 'gspo' is not one of the methods"):
        load_compare(path)


def _report(tmp_path, baseline: str, runs: list[tuple[str, int, float, dict]]):
    """build_report over fake finished runs ``(method, seed, accuracy, extra eval keys)``: pass@1 is the
    accuracy, pass@4 the accuracy + 0.2, 320 rollouts and 10 s each."""
    listed = []
    for method, seed, acc, extra in runs:
        folder = tmp_path / "runs" / method / f"seed{seed}"
        _fake_run(folder, acc_before=0.1, acc_after=acc, passk={"pass@1": acc, "pass@4": acc + 0.2, **extra},
                  maj=acc, reward_tail=[acc, acc], entropy=1.0, length=10.0, rollouts=320, seconds=10.0)
        listed.append({"method": method, "seed": seed, "status": "done", "run_dir": str(folder)})
    return build_report(tmp_path, listed, {"kind": "rollouts", "value": 320}, baseline=baseline)


@pytest.mark.slow  # over ~2 s: not in make test-fast
def test_subset_metrics_are_paired_and_do_not_break_the_pass_at_k_columns(tmp_path):
    # The hard regime's evaluation adds greedy_accuracy/<subset> and pass@k/<subset> keys.
    results = _report(tmp_path, "grpo", [
        (method, seed, acc, {"greedy_accuracy/hard": acc / 2, "pass@4/hard": acc / 4, "greedy_accuracy/base": acc})
        for seed, (b, d) in enumerate(zip(BASE_ACC, DIFFS)) for method, acc in (("grpo", b), ("new", b + d))])
    assert results["largest_k"] == 4 and list(results["runs"][0]["pass_at_k"]) == ["pass@1", "pass@4"]
    paired = results["paired"]
    assert paired["metrics"][-4:] == ["greedy_accuracy/base", "greedy_accuracy/hard", "pass@4/hard", "seconds"]
    hard = paired["methods"]["new"]["greedy_accuracy/hard"]
    assert hard["mean"] == pytest.approx(0.035) and hard["ci"] == pytest.approx(0.094139 / 2, abs=1e-6)
    assert paired["methods"]["new"]["pass@4/hard"]["mean"] == pytest.approx(0.0175)
    assert "greedy_accuracy/hard" in (tmp_path / "results.md").read_text()


def test_threads_flag_overrides_the_files_run_threads(tmp_path):
    from rlvr.compare.config import load_compare
    from rlvr.compare.runner import _tree

    path = tmp_path / "cmp.yaml"
    path.write_text("methods: {grpo: {preset: grpo}}\nbudget: {steps: 2}\nbase: {run: {threads: 4}}\n")
    cfg = load_compare(path)
    method = cfg.methods[0]
    assert _tree(cfg, method, 0, {}, 2)["run"]["threads"] == 4  # the file's choice stands by default
    assert _tree(cfg, method, 0, {}, 1, forced=True)["run"]["threads"] == 1  # rlvr compare --threads 1


@pytest.mark.slow  # over ~2 s: not in make test-fast
def test_a_training_loops_own_heldout_measure_is_paired(tmp_path):
    # LURE's evaluation adds heldout/... keys (its pursuit capture): paired like the task's metrics.
    results = _report(tmp_path, "warm_only", [
        (method, seed, acc, {"heldout/capture": acc / 2, "heldout/capture/lure_arithmetic": acc,
                             "calibration/stated_frac": 1.0})
        for seed, (b, d) in enumerate(zip(BASE_ACC, DIFFS)) for method, acc in (("warm_only", b), ("lure", b + d))])
    paired = results["paired"]
    assert paired["metrics"][-3:] == ["heldout/capture", "heldout/capture/lure_arithmetic", "seconds"]
    capture = paired["methods"]["lure"]["heldout/capture"]
    assert capture["mean"] == pytest.approx(0.035) and capture["ci"] == pytest.approx(0.094139 / 2, abs=1e-6)
    assert "heldout/capture" in (tmp_path / "results.md").read_text()


@pytest.mark.slow  # over ~2 s: not in make test-fast
def test_calibration_errors_are_paired_with_lower_as_better(tmp_path):
    # C3RL's claim is calibration: Brier and ECE of the stated confidences, paired; a drop is a win.
    results = _report(tmp_path, "grpo", [
        (method, seed, b, {"calibration/brier": brier, "calibration/ece": brier / 2, "calibration/stated_frac": 1.0})
        for seed, (b, d) in enumerate(zip(BASE_ACC, DIFFS)) for method, brier in (("grpo", 0.30), ("c3rl", 0.30 - d))])
    paired = results["paired"]
    assert paired["metrics"][-3:] == ["calibration/brier", "calibration/ece", "seconds"]
    brier = paired["methods"]["c3rl"]["calibration/brier"]
    assert brier["mean"] == pytest.approx(-0.07) and brier["ci"] == pytest.approx(0.094139, abs=1e-6)
    assert (brier["wins"], brier["ties"], brier["losses"]) == (4, 0, 1)  # DIFFS: four drops, one rise
    assert "Brier (lower better)" in (tmp_path / "results.md").read_text()
