"""The comparison report: across-seed statistics, results.json / results.md numbers, the PNGs."""

import json
import math

import numpy as np
import pytest

from rlvr.compare.plots import band, common_grid, moving_average
from rlvr.compare.report import best_methods, build_report, describe_budget, final_mean, format_cell
from rlvr.compare.stats import mean_ci, t_quantile

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --- stats -------------------------------------------------------------------------------------

def test_mean_ci_golden_three_values():
    # [1, 2, 3]: mean 2; s² = (1 + 0 + 1) / (3 − 1) = 1 → s = 1; ci = t_{0.975,2} · 1/√3 = 4.303/√3
    out = mean_ci([1, 2, 3])
    assert out["n"] == 3 and out["mean"] == pytest.approx(2.0) and out["std"] == pytest.approx(1.0)
    assert out["ci"] == pytest.approx(4.303 / math.sqrt(3)) and out["ci"] == pytest.approx(2.4843, abs=1e-4)


def test_mean_ci_two_values_uses_df_one():
    # [0.5, 0.7]: mean 0.6; s = √((0.01 + 0.01) / 1) = 0.1·√2; ci = 12.706 · 0.1·√2 / √2 = 1.2706
    out = mean_ci([0.5, 0.7])
    assert out["std"] == pytest.approx(0.1 * math.sqrt(2)) and out["ci"] == pytest.approx(1.2706)


def test_mean_ci_ddof_is_explicit():
    # ddof = 0 divides by n: [1, 2, 3] → s² = 2/3
    assert mean_ci([1, 2, 3], ddof=0)["std"] == pytest.approx(math.sqrt(2 / 3))


def test_mean_ci_beyond_table_uses_normal_quantile():
    # 32 values, half 0 and half 1: mean 0.5; s² = 32·0.25 / 31 = 8/31; df = 31 > 30 → 1.96
    out = mean_ci([0, 1] * 16)
    assert out["std"] == pytest.approx(math.sqrt(8 / 31))
    assert out["ci"] == pytest.approx(1.96 * math.sqrt(8 / 31) / math.sqrt(32))
    assert t_quantile(30) == 2.042 and t_quantile(31) == 1.96 and t_quantile(1) == 12.706


def test_mean_ci_small_and_missing_samples():
    assert mean_ci([0.25]) == {"mean": 0.25, "ci": None, "n": 1, "std": None}
    assert mean_ci([]) == {"mean": None, "ci": None, "n": 0, "std": None}
    # None and NaN are dropped, not counted as zeros: [1, 3] → mean 2
    assert mean_ci([1, None, float("nan"), 3])["n"] == 2 and mean_ci([1, None, 3])["mean"] == 2
    with pytest.raises(ValueError, match="0.95"):
        mean_ci([1, 2], level=0.9)
    with pytest.raises(ValueError):
        t_quantile(0)


# --- helpers -----------------------------------------------------------------------------------

def test_final_mean_is_last_tenth_of_steps():
    rows = [{"x": float(i)} for i in range(1, 21)]  # 20 rows → last 2: (19 + 20) / 2
    assert final_mean(rows, "x") == pytest.approx(19.5)
    assert final_mean(rows[:5], "x") == 5.0  # ceil(0.5) = 1 row
    assert final_mean([{"y": 1}], "x") is None


def test_moving_average_expands_at_start():
    # window 2 over [1, 3, 5]: [1, (1+3)/2, (3+5)/2]
    assert moving_average([1.0, 3.0, 5.0], 2) == pytest.approx([1.0, 2.0, 4.0])


def test_band_interpolates_and_never_extrapolates():
    # seed a covers x ∈ [0, 2], seed b only [0, 1]; at x = 0.5: a = 0.5, b = 1.5 (b is 1 + x)
    curves = [(np.array([0.0, 2.0]), np.array([0.0, 2.0])), (np.array([0.0, 1.0]), np.array([1.0, 2.0]))]
    mean, lo, hi = band(curves, np.array([0.5, 2.0, 3.0]))
    assert mean[0] == pytest.approx(1.0) and lo[0] == pytest.approx(0.5) and hi[0] == pytest.approx(1.5)
    assert mean[1] == pytest.approx(2.0) and lo[1] == hi[1] == pytest.approx(2.0)  # only seed a at x = 2
    assert math.isnan(mean[2])  # nobody ran that far


def test_common_grid_is_the_range_every_seed_covers():
    # seeds cover [1, 3] and [2, 5]: shared range [2, 3]; union of their x inside it = {2, 3}
    xs = [np.array([1.0, 2.0, 3.0]), np.array([2.0, 3.0, 5.0])]
    assert common_grid(xs).tolist() == [2.0, 3.0]
    assert common_grid(xs, dense=True, points=3).tolist() == [2.0, 2.5, 3.0]
    assert len(common_grid([np.array([1.0]), np.array([2.0])])) == 0  # no overlap: nothing drawn
    assert len(common_grid([np.array([1.0]), np.array([])])) == 0


def test_format_cell():
    assert format_cell({"mean": 0.6, "ci": 1.2706, "n": 2, "std": 0.14}, 3) == "0.600 ± 1.271 (n=2)"
    assert format_cell({"mean": 0.25, "ci": None, "n": 1, "std": None}, 3) == "0.250 (n=1)"
    assert format_cell({"mean": None, "ci": None, "n": 0, "std": None}, 3) == "—"


def test_describe_budget_forms():
    assert describe_budget({"kind": "steps", "value": 300}) == \
        "Budget: 300 optimizer steps per run, equal for every run."
    assert "5000 sampled completions (rollouts) per run" in describe_budget({"max_rollouts": 5000, "steps": 0})
    both = describe_budget({"steps": 300, "max_seconds": 60.0})
    assert "300 optimizer steps" in both and "60 seconds" in both and "first it reaches" in both
    assert describe_budget({}) == "Budget: not recorded."
    # the runner's own sentence wins over the limits
    assert describe_budget({"steps": 300, "text": "300 optimizer steps per run, equal for every run"}) == \
        "Budget: 300 optimizer steps per run, equal for every run."


def test_best_skips_ties_and_single_methods():
    stat = lambda m: {"mean": m, "ci": None, "n": 1, "std": None}  # noqa: E731
    stats = {"a": {"accuracy_after": stat(0.5), "seconds": stat(10.0)},
             "b": {"accuracy_after": stat(0.5), "seconds": stat(12.0)}}
    assert best_methods(stats, ["accuracy_after", "seconds"]) == {"seconds": "a"}  # tie → unmarked
    assert best_methods({"a": stats["a"]}, ["seconds"]) == {}


# --- the report on synthetic run folders -------------------------------------------------------

def _fake_run(folder, *, acc_before, acc_after, passk, maj, reward_tail, entropy, length, rollouts, seconds):
    """20 logged steps; the last two rewards are ``reward_tail`` (the final-10 % window)."""
    folder.mkdir(parents=True)
    per_step = rollouts // 20
    rows = []
    for step in range(1, 21):
        row = {"step": step, "reward/mean": 0.0 if step <= 18 else reward_tail[step - 19],
               "rollout/entropy": entropy, "rollout/response_length": length,
               "rollout/spent": per_step * step, "time/elapsed": seconds * step / 20, "loss/total": 0.1}
        if step % 10 == 0:
            row["eval/accuracy"] = acc_after
        rows.append(row)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ev = lambda acc, p: {"num_problems": 10, "greedy_accuracy": acc, **p, "maj@4": maj,  # noqa: E731
                         "greedy_length": 5.0, "sample_length": 6.0}
    before_p = {"pass@1": 0.1, "pass@2": 0.2, "pass@4": 0.3}
    summary = {"steps": 20, "rollouts": rollouts, "seconds": seconds, "stopped_by": "steps",
               "eval_before": ev(acc_before, before_p), "eval_after": ev(acc_after, passk),
               "accuracy_before": acc_before, "accuracy_after": acc_after}
    (folder / "summary.json").write_text(json.dumps(summary))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp")
    alpha = dict(acc_before=0.2, entropy=1.0, maj=0.6)
    specs = {
        ("alpha", 0): dict(alpha, acc_after=0.5, passk={"pass@1": 0.5, "pass@2": 0.6, "pass@4": 0.8},
                           reward_tail=[0.4, 0.6], length=10.0, rollouts=320, seconds=100.0),
        ("alpha", 1): dict(alpha, acc_after=0.7, passk={"pass@1": 0.7, "pass@2": 0.8, "pass@4": 1.0},
                           reward_tail=[0.6, 0.8], length=20.0, rollouts=320, seconds=120.0, entropy=1.2),
        ("beta", 0): dict(acc_before=0.2, acc_after=0.3, passk={"pass@1": 0.3, "pass@2": 0.6, "pass@4": 0.95},
                          maj=0.5, reward_tail=[0.2, 0.2], entropy=0.5, length=8.0, rollouts=400, seconds=90.0),
        ("beta", 1): dict(acc_before=0.2, acc_after=0.3, passk={"pass@1": 0.3, "pass@2": 0.6, "pass@4": 0.95},
                          maj=0.5, reward_tail=[0.2, 0.2], entropy=0.5, length=8.0, rollouts=480, seconds=90.0),
    }
    runs = []
    for (method, seed), spec in specs.items():
        folder = out / "runs" / method / f"seed{seed}"
        _fake_run(folder, **spec)
        runs.append({"method": method, "seed": seed, "status": "done", "run_dir": str(folder)})
    runs.append({"method": "beta", "seed": 2, "status": "failed", "run_dir": str(out / "runs/beta/seed2"),
                 "error": "NonFiniteLossError: step 7: loss is nan\n(traceback)"})
    results = build_report(out, runs, {"kind": "steps", "value": 20})
    return out, results


def test_results_json_holds_the_per_run_numbers(report):
    out, results = report
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk == json.loads(json.dumps(results))  # the file is the returned dict
    assert on_disk["budget"] == {"kind": "steps", "value": 20}
    runs = {(r["method"], r["seed"]): r for r in on_disk["runs"]}
    a1 = runs[("alpha", 1)]
    assert a1["status"] == "done" and a1["accuracy_before"] == 0.2 and a1["accuracy_after"] == 0.7
    assert a1["accuracy_gain"] == pytest.approx(0.5)
    assert a1["pass_at_k"] == {"pass@1": 0.7, "pass@2": 0.8, "pass@4": 1.0}
    assert a1["pass_at_k_before"] == {"pass@1": 0.1, "pass@2": 0.2, "pass@4": 0.3}
    assert a1["maj_at_k"] == {"maj@4": 0.6}
    assert a1["final_reward"] == pytest.approx(0.7)  # (0.6 + 0.8) / 2 over the last 2 of 20 steps
    assert a1["final_entropy"] == pytest.approx(1.2) and a1["final_response_length"] == pytest.approx(20.0)
    assert (a1["rollouts"], a1["seconds"], a1["steps"], a1["stopped_by"]) == (320, 120.0, 20, "steps")
    failed = runs[("beta", 2)]
    assert failed["status"] == "failed" and "NonFiniteLossError" in failed["error"]
    assert "accuracy_after" not in failed


def test_results_json_means_and_intervals(report):
    _, results = report
    a, b = results["methods"]["alpha"], results["methods"]["beta"]
    # alpha accuracy after [0.5, 0.7]: mean 0.6, s = 0.1·√2, ci = 12.706 · s/√2 = 1.2706
    assert a["accuracy_after"]["mean"] == pytest.approx(0.6) and a["accuracy_after"]["ci"] == pytest.approx(1.2706)
    assert a["accuracy_gain"]["mean"] == pytest.approx(0.4)  # gains 0.3, 0.5
    assert a["final_reward"]["mean"] == pytest.approx(0.6)  # finals 0.5, 0.7
    # beta rollouts [400, 480]: mean 440, s = 40·√2, ci = 12.706 · 40 = 508.24; the failed seed is not in n
    assert b["rollouts"]["mean"] == pytest.approx(440) and b["rollouts"]["ci"] == pytest.approx(508.24)
    assert b["rollouts"]["n"] == 2 and b["accuracy_after"]["std"] == pytest.approx(0.0)
    assert b["pass@4"]["mean"] == pytest.approx(0.95) and a["pass@4"]["mean"] == pytest.approx(0.9)
    assert results["largest_k"] == 4
    # higher is better: accuracy, gain, reward, maj@4 → alpha; pass@4 → beta;
    # lower is better: rollouts → alpha (320 < 440), seconds → beta (90 < 110)
    assert results["best"] == {"accuracy_after": "alpha", "accuracy_gain": "alpha", "final_reward": "alpha",
                               "pass@4": "beta", "maj@4": "alpha", "rollouts": "alpha", "seconds": "beta"}


def test_results_md_table_bold_and_failures(report):
    out, _ = report
    md = (out / "results.md").read_text()
    assert "Budget: 20 optimizer steps per run, equal for every run." in md
    assert "Seeds: 0, 1, 2" in md
    assert "the column is **not a speed measurement**" in md  # the seconds column's caveat, in every report
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    header = [c.strip() for c in rows["method"].split("|")[1:-1]]
    assert header[:5] == ["method", "greedy acc. after", "gain over before", "pass@4", "maj@4"]
    alpha = [c.strip() for c in rows["alpha"].split("|")[1:-1]]
    beta = [c.strip() for c in rows["beta"].split("|")[1:-1]]
    col = {name: i for i, name in enumerate(header)}
    assert alpha[col["greedy acc. after"]] == "**0.600 ± 1.271 (n=2)**"
    assert beta[col["greedy acc. after"]] == "0.300 ± 0.000 (n=2)"
    assert beta[col["pass@4"]] == "**0.950 ± 0.000 (n=2)**" and alpha[col["pass@4"]] == "0.900 ± 1.271 (n=2)"
    assert alpha[col["response length (final)"]] == "15.0 ± 63.5 (n=2)"  # never bold: no better direction
    assert beta[col["entropy (final)"]] == "0.500 ± 0.000 (n=2)"
    assert alpha[col["rollouts spent"]] == "**320 ± 0 (n=2)**"
    assert beta[col["rollouts spent"]] == "440 ± 508 (n=2)"
    assert beta[col["seconds"]] == "**90.0 ± 0.0 (n=2)**"
    assert "## Failed or missing runs" in md
    assert "- beta seed 2: failed — NonFiniteLossError: step 7: loss is nan (traceback)" in md


def test_every_png_is_written(report):
    out, _ = report
    for name in ("curves_steps.png", "curves_rollouts.png", "pass_at_k.png", "entropy.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 1024, name


def test_done_without_summary_is_reported_missing(tmp_path):
    runs = [{"method": "m", "seed": 0, "status": "done", "run_dir": str(tmp_path / "runs/m/seed0")},
            {"method": "m", "seed": 1, "status": "missing", "run_dir": str(tmp_path / "runs/m/seed1")}]
    results = build_report(tmp_path, runs, {"steps": 5})
    assert [r["status"] for r in results["runs"]] == ["missing", "missing"]
    assert "no summary.json" in results["runs"][0]["error"]
    assert results["methods"]["m"] == {} and results["best"] == {}
    md = (tmp_path / "results.md").read_text()
    assert "| m | — |" in md and "- m seed 1: missing — no error recorded" in md
    assert (tmp_path / "curves_steps.png").read_bytes()[:8] == PNG_MAGIC  # empty axes, still a figure


def test_damaged_run_files_fail_that_run_only(tmp_path):
    folder = tmp_path / "runs/m/seed0"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text("{not json")
    runs = [{"method": "m", "seed": 0, "status": "done", "run_dir": str(folder), "reused": True}]
    (rec,) = build_report(tmp_path, runs, {"steps": 5})["runs"]
    assert rec["status"] == "failed" and "unreadable run files" in rec["error"]
    assert rec["reused"] is True  # the runner's extra fields pass through
