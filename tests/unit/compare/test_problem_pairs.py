"""Problem-level pairing beside the seed-level test: McNemar and the problem-paired standard error
(golden), per-problem values from compact outcomes, pairing over seeds, the report's section; and the
power section of `rlvr compare`'s report."""

from __future__ import annotations

import json
import math

import pytest

from rlvr.compare.power import compare_power
from rlvr.compare.problem_pairs import compact_outcomes, pair_problems, per_problem
from rlvr.compare.report import build_report, power_lines
from rlvr.compare.stats import mcnemar_p, problem_paired
from rlvr.compare.verdict_tests import mde
from rlvr.eval.outcomes import write_outcomes
from tests.unit.compare.test_compare_report import _fake_run


def test_mcnemar_p_golden():
    assert mcnemar_p(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)  # 0.109375
    assert mcnemar_p(0, 6) == pytest.approx(2 / 64) and mcnemar_p(6, 0) == mcnemar_p(0, 6)
    assert mcnemar_p(5, 5) == 1.0 and mcnemar_p(0, 0) == 1.0
    with pytest.raises(ValueError, match="counts must be >= 0"):
        mcnemar_p(-1, 2)


def test_problem_paired_golden():
    out = problem_paired([1, 1, 0, 0, 1], [0, 1, 1, 0, 0])
    # d = 1 0 −1 0 1: mean .2; Σ(d − .2)² = 2.8, s² = .7, se = √(.7 / 5) = .374166;
    # b = 2, c = 1, p = 2·4/8 → 1
    assert out["mean"] == pytest.approx(0.2) and out["se"] == pytest.approx(math.sqrt(0.14))
    assert (out["b"], out["c"], out["p"]) == (2, 1, 1.0)


def compact(greedy: str, correct: str = "", ids: str = "same") -> dict:
    return {"n": len(greedy), "ids": ids, "k": 4 if correct else 0, "greedy": greedy, "maj": None,
            "correct": correct or None}


def test_per_problem_values_of_each_metric():
    out = compact("10", correct="31")
    assert per_problem(out, "accuracy_after") == [1.0, 0.0]
    assert per_problem(out, "pass@2") == [1.0, 0.5]  # c = 3 of 4: one wrong < 2 → 1; c = 1: 1 − C(3,2)/C(4,2)
    assert per_problem(out, "pass@8") is None and per_problem(out, "final_reward") is None
    assert per_problem(None, "accuracy_after") is None


def records(pairs: dict[int, tuple[str, str]], mismatched: tuple[int, ...] = ()) -> list[dict]:
    out = []
    for seed, (ours, theirs) in pairs.items():
        out.append({"method": "grpo", "seed": seed, "status": "done", "outcomes": compact(theirs)})
        ids = "other" if seed in mismatched else "same"
        out.append({"method": "new", "seed": seed, "status": "done", "outcomes": compact(ours, ids=ids)})
    return out


def test_pairing_over_seeds_golden():
    got = pair_problems(records({0: ("1100", "0100"), 1: ("1111", "0011")}), "new", "grpo", "accuracy_after")
    assert [(s["seed"], s["b"], s["c"]) for s in got["seeds"]] == [(0, 1, 0), (1, 2, 0)]
    assert (got["b"], got["c"]) == (3, 0) and got["p"] == pytest.approx(2 / 8)
    assert got["mean"] == pytest.approx(0.375)
    # se² per seed: d = 1 0 0 0 → s² = .25, se² = .0625; d = 1 1 0 0 → s² = 1/3, se² = 1/12
    assert got["se_eval"] == pytest.approx(math.sqrt(0.0625 + 1 / 12) / 2)
    # seed means .25, .5: s² = .03125; eval share = mean se² / s² = .0729167 / .03125
    assert got["eval_share"] == pytest.approx((0.0625 + 1 / 12) / 2 / 0.03125)


def test_pairing_needs_the_same_problems_and_both_runs():
    got = pair_problems(records({0: ("1100", "0100"), 1: ("1111", "0011")}, mismatched=(1,)), "new", "grpo",
                        "accuracy_after")
    assert [s["seed"] for s in got["seeds"]] == [0] and got["mismatched"] == [1]
    no_outcomes = [{"method": m, "seed": 0, "status": "done"} for m in ("grpo", "new")]
    assert pair_problems(no_outcomes, "new", "grpo", "accuracy_after") is None


def test_compact_outcomes_from_a_run_folder(tmp_path):
    rows = [{"index": i, "id": f"q{i}", "subset": None, "greedy": g, "correct": c, "k": 4, "maj": m}
            for i, (g, c, m) in enumerate([(1.0, 3, 1.0), (0.0, 0, 0.0), (1.0, 4, 1.0)])]
    write_outcomes(tmp_path, None, rows)
    out = compact_outcomes(tmp_path)
    assert (out["greedy"], out["correct"], out["maj"], out["k"], out["n"]) == ("101", "304", "101", 4, 3)
    assert compact_outcomes(tmp_path / "none") is None


@pytest.mark.slow  # over ~2 s (figures): not in make test-fast
def test_report_pairs_problems_when_runs_saved_outcomes(tmp_path):
    runs = []
    for seed, (ours, theirs) in {0: ("1100", "0100"), 1: ("1111", "0011")}.items():
        for method, bits in (("grpo", theirs), ("new", ours)):
            folder = tmp_path / "runs" / method / f"seed{seed}"
            acc = bits.count("1") / 4
            _fake_run(folder, acc_before=0.1, acc_after=acc, passk={"pass@1": acc}, maj=acc, reward_tail=[0, 0],
                      entropy=1.0, length=5.0, rollouts=320, seconds=1.0)
            write_outcomes(folder, None, [{"index": i, "id": f"s{seed}q{i}", "subset": None, "greedy": float(ch)}
                                          for i, ch in enumerate(bits)])
            runs.append({"method": method, "seed": seed, "status": "done", "run_dir": str(folder)})
    results = build_report(tmp_path, runs, {"steps": 20}, baseline="grpo")
    pair = results["problem_pairs"]["new"]["accuracy_after"]
    assert (pair["b"], pair["c"]) == (3, 0)
    assert json.loads((tmp_path / "results.json").read_text())["runs"][0]["outcomes"]["greedy"] == "0100"
    assert "| new | accuracy_after | 3 / 0 (0.25) | 1/0 2/0 |" in (tmp_path / "results.md").read_text()


def test_power_section_of_a_comparison(tmp_path):
    from rlvr.compare.config import load_compare
    path = tmp_path / "cmp.yaml"
    path.write_text("methods: {grpo: {preset: grpo}, dapo: {preset: dapo}, gspo: {preset: gspo}}\n"
                    "budget: {steps: 2}\nseeds: [0, 1, 2]\n")
    cfg = load_compare(path, build=False)
    acc = {"grpo": [0.30, 0.40, 0.20], "dapo": [0.32, 0.44, 0.21], "gspo": [0.30, 0.38, 0.25]}
    recs = [{"method": m, "seed": s, "status": "done", "accuracy_after": v}
            for m, vs in acc.items() for s, v in enumerate(vs)]
    power = compare_power(cfg, recs)
    assert power["m"] == 2 and not power["registered"]  # no claims: every method on greedy accuracy
    (row,) = power["rows"]
    # paired Δ: dapo .02 .04 .01 (Σ(x − mean)² = .00046667); gspo 0 −.02 .05 (.00260); pooled over 2 + 2 df
    sd = math.sqrt((0.00046667 + 0.0026) / 4)
    assert row["sd"] == pytest.approx(sd, rel=1e-4) and row["n"] == 3
    assert row["mde_corrected"] == pytest.approx(mde(row["sd"], 3, 0.025)) and row["mde_corrected"] > row["mde"]
    text = "\n".join(power_lines(power))
    assert "## Power" in text and f"| accuracy_after | 3 | {row['sd']:.3f} |" in text
