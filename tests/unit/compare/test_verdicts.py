"""Golden tests of every verdict rule and gate of ``rlvr findings`` on synthetic results.

Each family is built so the rule under test fires by construction: per-seed accuracies are written out,
so the paired differences (and hence every p-value's side of α) are known before the test runs.
"""

from __future__ import annotations

import math

import pytest

from rlvr.compare.claims import Claim, Mechanism
from rlvr.compare.stats import T_975
from rlvr.compare.tdist import t_cdf, t_ppf
from rlvr.compare.verdict_tests import claim_p, holm, mde, one_sided_flip_p, pooled_sd, seeds_for, sign_flip_claim
from rlvr.compare.verdicts import T_ONLY, Family, decide, gates, judge, margin_of

SEEDS = list(range(10))
BEFORE = 0.30
BASE = [0.40, 0.42, 0.41, 0.43, 0.40, 0.44, 0.41, 0.42, 0.43, 0.40]  # gain ~ +0.116, every seed up
WIGGLE = [0.000, 0.002, 0.001, 0.003, 0.000, 0.002, 0.001, 0.003, 0.000, 0.002]  # keeps the SD above 0


def _shift(delta: float, values=BASE) -> list[float]:
    return [v + delta + w for v, w in zip(values, WIGGLE)]


def _records(method: str, after: list[float], before: float = BEFORE, **extra) -> list[dict]:
    return [{"method": method, "seed": s, "status": "done", "accuracy_before": before, "accuracy_after": a,
             "accuracy_gain": a - before, **{k: v[i] for k, v in extra.items()}}
            for i, (s, a) in enumerate(zip(SEEDS, after))]


def _claim(method: str, direction: str = "better", **kw) -> Claim:
    return Claim(method=method, section="§9.9", title=method, paper="synthetic", metric="accuracy_after",
                 direction=direction, **kw)


def _family(methods: dict[str, list[float]], claims: list[Claim], roles: dict[str, str] | None = None,
            base: list[float] = BASE, name: str = "synthetic", extra: dict | None = None) -> Family:
    records = _records("base", base, **(extra or {}).get("base", {}))
    for m, after in methods.items():
        records += _records(m, after, **(extra or {}).get(m, {}))
    all_roles = {"base": "baseline", **{m: "method" for m in methods}, **(roles or {})}
    return Family(name=name, baseline="base", claims=tuple(claims), roles=all_roles, records=records,
                  seeds=tuple(SEEDS))


CONTROLS = {"harmed": _shift(-0.06),  # a harm of 6 points, detected by construction
            "rl_again": [v + (0.01 if i % 2 else -0.01) for i, v in enumerate(BASE)]}  # mean difference 0
CONTROL_ROLES = {"harmed": "positive_control", "rl_again": "negative_control"}


def _verdict(methods, claims, **kw) -> list[dict]:
    return judge([_family({**CONTROLS, **methods}, claims, roles=CONTROL_ROLES, **kw)])


# --- t distribution, Holm, MDE ------------------------------------------------------------------

def test_t_quantiles_match_the_printed_table_and_known_values():
    for df, printed in T_975.items():
        assert abs(t_ppf(0.975, df) - printed) <= 5e-4, df  # the table is rounded to 3 decimals
    assert t_cdf(0.0, 7) == pytest.approx(0.5)
    assert t_ppf(0.80, 4) == pytest.approx(0.941, abs=5e-4)  # printed one-sided 80 % quantile, df = 4
    assert t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + atan(1)/π


def test_holm_adjusts_step_down_by_hand():
    out = holm({"a": 0.01, "b": 0.04, "c": 0.03}, alpha=0.05)
    # sorted a (×3 = 0.03), c (×2 = 0.06), b (×1 = 0.04, raised to 0.06 to stay monotone)
    assert [out[k]["p_holm"] for k in "acb"] == pytest.approx([0.03, 0.06, 0.06])
    assert [out[k]["rejected"] for k in "acb"] == [True, False, False]  # 0.03 > 0.05/2 stops the steps
    assert [out[k]["level"] for k in "acb"] == pytest.approx([0.05 / 3, 0.05 / 2, 0.05])


def test_mde_is_the_hand_computed_exact_t_value():
    # (t_{0.975,4} + t_{0.80,4}) · 0.05 / √5 with the printed quantiles 2.776 and 0.941
    assert mde(0.05, 5) == pytest.approx((2.776 + 0.941) * 0.05 / math.sqrt(5), rel=2e-4)
    assert mde(0.05, 5, alpha=0.01) > mde(0.05, 5)  # a stricter level needs a larger effect
    n = seeds_for(0.03, 0.03)
    assert mde(0.03, n) <= 0.03 < mde(0.03, n - 1)
    assert pooled_sd([[0.0, 2.0], [1.0, 1.0, 1.0]]) == pytest.approx(math.sqrt(2.0 / 3.0))  # (2 + 0) / (1 + 2)


def test_sign_flip_floor_with_five_seeds_is_above_alpha():
    flip = sign_flip_claim([0.1, 0.2, 0.3, 0.4, 0.5], "better", None)
    assert flip["p"] == pytest.approx(2 / 32) and flip["floor"] == pytest.approx(2 / 32)
    assert sign_flip_claim([0.1, 0.2, 0.0, 0.4, 0.5], "better", None)["floor"] == pytest.approx(2 / 16)  # a tie
    assert one_sided_flip_p([1.0, 1.0, 1.0]) == pytest.approx(1 / 8)


def test_claim_p_directions():
    up = [0.05 + w for w in WIGGLE]
    assert claim_p(up, "better", None)["if_rejected"] == "reproduced"
    assert claim_p([-x for x in up], "better", None)["if_rejected"] == "opposite"
    assert claim_p([-0.01 + w for w in WIGGLE], "not_worse", 0.05)["if_rejected"] == "reproduced"
    assert claim_p([-0.09 + w for w in WIGGLE], "not_worse", 0.05)["if_rejected"] == "opposite"
    assert claim_p([w - 0.0015 for w in WIGGLE], "matches", 0.05)["p"] < 1e-6  # well inside ±0.05
    assert claim_p([0.2 + w for w in WIGGLE], "matches", 0.05)["p"] > 0.99  # far outside


# --- verdicts -----------------------------------------------------------------------------------

def _alternating(size: float, mean: float = 0.0) -> list[float]:
    return [v + mean + (size if i % 2 else -size) for i, v in enumerate(BASE)]


def test_reproduced_opposite_ruled_out_and_inconclusive():
    # null: a mean difference of 0 with SD 0.0105, interval ±0.0075, below the effect of interest
    # (0.25 × the baseline's gain = 0.029); noisy: the same mean with ±0.05 swings, interval ±0.038
    rows = _verdict({"good": _shift(0.05), "bad": _shift(-0.05), "null": _alternating(0.01),
                     "noisy": _alternating(0.05)}, [_claim(m) for m in ("good", "bad", "null", "noisy")])
    verdicts = {r["claim"].method: r["verdict"] for r in rows}
    assert verdicts == {"good": "reproduced", "bad": "opposite", "null": "ruled out", "noisy": "inconclusive"}
    why = {r["claim"].method: r["why"] for r in rows}
    assert "excludes +0.029 (0.25 × the baseline's gain)" in why["null"]
    assert "does not exclude +0.029" in why["noisy"]
    assert "sign-flip p" in next(r for r in rows if r["claim"].method == "good")["why"]
    assert all(not r["gates"] for r in rows)


def test_holm_runs_across_families_and_can_undo_a_raw_rejection():
    # 10 seeds, a modest effect: raw p below 0.05, but not below 0.05/m once 30 null claims join it
    modest = [v + d for v, d in zip(BASE, [0.035, -0.005, 0.025, 0.005, 0.03, 0.0, 0.02, 0.015, 0.025, -0.005])]
    harmed = {"harmed": CONTROLS["harmed"]}, {"harmed": "positive_control"}  # no second baseline arm here
    alone = judge([_family({**harmed[0], "modest": modest}, [_claim("modest")], roles=harmed[1])])[0]
    assert alone["test"]["p"] < 0.05 and alone["verdict"] == "reproduced"
    nulls = {f"n{i}": [v + (0.01 if (j + i) % 2 else -0.01) for j, v in enumerate(BASE)] for i in range(30)}
    crowd = _family({**harmed[0], **nulls}, [_claim(m) for m in nulls], roles=harmed[1], name="other")
    first = _family({**harmed[0], "modest": modest}, [_claim("modest")], roles=harmed[1])
    rows = judge([first, crowd])
    row = next(r for r in rows if r["claim"].method == "modest")
    assert row["holm"]["m"] == 31 and row["verdict"] == "inconclusive" and "not rejected" in row["why"]
    assert "lies above 0, below +0.029" in row["why"]  # the 95 % interval, not corrected: positive but small


def test_five_seeds_verdict_says_the_sign_flip_test_cannot_agree():
    fam = _family({**CONTROLS, "good": _shift(0.05)}, [_claim("good")], roles=CONTROL_ROLES)
    fam.records[:] = [r for r in fam.records if r["seed"] < 5]
    row = judge([fam])[0]
    assert (row["verdict"], row["qualifier"]) == ("reproduced", T_ONLY)
    assert "cannot reach" in row["why"] and "0.0625" in row["why"]


def test_sign_flip_disagreement_gives_ruled_out_or_inconclusive():
    row = {"gates": [], "claim": _claim("m"), "margin": None, "effect": 0.03, "effect_source": "synthetic",
           "holm": {"rejected": True, "level": 0.01, "p_holm": 0.004},
           "flip_holm": {"rejected": False, "level": 0.01, "p_holm": 0.03},
           "flip": {"p": 0.03, "floor": 0.002}, "test": {"if_rejected": "reproduced", "n": 10, "p": 0.001},
           "interval": (0.005, 0.04)}
    kind, qualifier, why = decide(row)
    assert (kind, qualifier) == ("inconclusive", "") and "disagrees" in why
    kind, _, why = decide({**row, "interval": (-0.001, 0.02)})
    assert kind == "ruled out" and "excludes +0.030 (synthetic)" in why


def test_matches_uses_a_quarter_of_the_baseline_gain_as_margin():
    fam = _family({**CONTROLS, "same": _shift(0.0005)}, [_claim("same", "matches")], roles=CONTROL_ROLES)
    gain = sum(b - BEFORE for b in BASE) / len(BASE)
    assert margin_of(fam, fam.claims[0]) == pytest.approx(0.25 * gain)
    assert judge([fam])[0]["verdict"] == "reproduced"
    assert _verdict({"worse": _shift(-0.01)}, [_claim("worse", "not_worse", margin=0.05)])[0]["verdict"] == "reproduced"


# --- gates --------------------------------------------------------------------------------------

def _gates(fam: Family) -> list[str]:
    return gates(fam, fam.claims[0], n_claims=1)


def test_gate_baseline_gain_must_exclude_zero():
    flat = [BEFORE + (0.01 if i % 2 else -0.01) for i in range(10)]  # the baseline does not learn
    fam = _family({"harmed": [v - 0.06 for v in flat], "good": [v + 0.05 for v in flat]}, [_claim("good")],
                  roles={"harmed": "positive_control"}, base=flat)
    row = judge([fam])[0]
    assert row["verdict"] == "not testable here" and "baseline gain" in row["why"]


def test_gate_no_positive_control_is_underpowered():
    row = judge([_family({"good": _shift(0.05)}, [_claim("good")])])[0]
    assert row["verdict"] == "not testable here" and "no positive control" in row["why"]


def test_gate_positive_control_not_detected():
    fam = _family({"harmed": _shift(-0.0005), "good": _shift(0.05)}, [_claim("good")],
                  roles={"harmed": "positive_control"})
    assert any("positive control harmed not detected" in g for g in _gates(fam))


def test_a_negative_control_that_differs_voids_nothing_and_is_a_second_baseline_arm():
    # rl_again differs from the baseline by +0.04 on every seed: under the old rule it voided the family
    fam = _family({"harmed": _shift(-0.06), "rl_again": _shift(0.04), "good": _shift(0.05)}, [_claim("good")],
                  roles=CONTROL_ROLES)
    assert not any("negative control" in g for g in _gates(fam))
    row = judge([fam])[0]
    assert row["verdict"] == "reproduced" and "against rl_again: the same" in row["why"]
    # the method equals the second arm seed by seed: reproduced against base, not against rl_again
    twin = _family({"harmed": _shift(-0.06), "rl_again": _shift(0.05), "good": _shift(0.05)}, [_claim("good")],
                   roles=CONTROL_ROLES)
    row = judge([twin])[0]
    assert row["verdict"] == "inconclusive" and row["why"].startswith("the baseline arms disagree: against base: "
                                                                     "reproduced")
    assert "against rl_again: ruled out" in row["why"]


def test_gate_mechanism_did_not_fire_or_is_not_recorded():
    fired = Mechanism(metric="steps", above=299)
    extra = {"good": {"steps": [7] * 10}}
    fam = _family({**CONTROLS, "good": _shift(0.05)}, [_claim("good", mechanism=fired)], roles=CONTROL_ROLES,
                  extra=extra)
    assert any(g.startswith("mechanism did not fire: mean steps 7") for g in _gates(fam))
    missing = _family({**CONTROLS, "good": _shift(0.05)},
                      [_claim("good", mechanism=Mechanism(metric="adv/x", window="all steps", above=0.0))],
                      roles=CONTROL_ROLES)
    assert any(g.startswith("mechanism not recorded") for g in _gates(missing))
    shorter = Mechanism(metric="final_response_length", vs_baseline="lower")
    extra = {"base": {"final_response_length": [50.0 + w for w in WIGGLE]},
             "good": {"final_response_length": [40.0 + 2 * w for w in WIGGLE]}}
    ok = _family({**CONTROLS, "good": _shift(0.05)}, [_claim("good", mechanism=shorter)], roles=CONTROL_ROLES,
                 extra=extra)
    assert not _gates(ok)


def test_gate_subset_zero_in_every_run():
    zero = {m: {"subsets": [{"greedy_accuracy/hard": 0.0}] * 10} for m in ("base", "good")}
    fam = _family({**CONTROLS, "good": _shift(0.05)}, [_claim("good", subset="hard")], roles=CONTROL_ROLES,
                  extra=zero)
    assert any("subset hard: greedy_accuracy/hard is 0 in every run" in g for g in _gates(fam))


def test_gate_pre_registered_not_testable_and_too_few_seeds():
    fam = _family({**CONTROLS, "good": _shift(0.05)}, [_claim("good", not_testable="one objective only")],
                  roles=CONTROL_ROLES)
    assert _gates(fam)[0] == "pre-registered: one objective only"
    fam.records[:] = [r for r in fam.records if r["seed"] == 0]
    assert "fewer than 2 paired seeds" in _gates(fam)


def test_family_table_states_each_control_outcome_as_the_gates_judge_it():
    from rlvr.compare.findings import _control_outcome, _controlled

    fam = _family({**CONTROLS, "good": _shift(0.05)}, [_claim("good")], roles=CONTROL_ROLES)
    harmed = _control_outcome(fam, "harmed", "positive_control", m=1, alpha=0.05)
    again = _control_outcome(fam, "rl_again", "negative_control", m=1, alpha=0.05)
    # harmed = base - 0.06 + WIGGLE: mean difference -0.06 + mean(WIGGLE) = -0.0586
    assert harmed.startswith("harmed (positive): accuracy_after -0.059 ± ") and harmed.endswith(": detected")
    assert again.startswith("rl_again (negative): accuracy_after +0.000 ± ") and again.endswith(": not different")
    weak = _family({"harmed": _shift(-0.0005), "good": _shift(0.05)}, [_claim("good")],
                   roles={"harmed": "positive_control"})
    assert _control_outcome(weak, "harmed", "positive_control", m=1, alpha=0.05).endswith(": not detected")
    assert "1 of 2 committed families have a positive control** (synthetic)" in _controlled(
        [fam, _family({"good": _shift(0.05)}, [_claim("good")], name="other")])
    assert "No committed family has a positive control yet" in _controlled([_family({}, [])])


def test_a_loops_own_heldout_measure_has_a_gain_over_the_warm_start():
    # LURE's pursuit capture is recorded under "subsets" (after) and "subsets_before" (the warm start):
    # a claim versus its warm start on it is the per-seed difference of the two, here +0.05 on every seed.
    before, after = [0.10 + 0.01 * s for s in SEEDS], [0.15 + 0.01 * s for s in SEEDS]
    extra = {"base": {"subsets": [{"heldout/capture": a} for a in after],
                      "subsets_before": [{"heldout/capture": b} for b in before]}}
    family = _family({}, [], extra=extra)
    gains = family.gains("base", "heldout/capture")
    assert sorted(gains) == SEEDS and all(g == pytest.approx(0.05) for g in gains.values())
    assert family.gains("base", "heldout/solved") == {}  # not recorded: no gain, never a 0


def test_a_family_with_only_an_own_gain_claim_describes_its_gains_and_controls():
    # self_play: the baseline's only claim is its own gain; the power column is then about the per-seed
    # gains (here after − 0.30), and the controls are judged on that claim's metric.
    from rlvr.compare.power import family_power
    from rlvr.compare.verdict_tests import pooled_sd
    from rlvr.compare.verdicts import described_claims

    own = Claim(method="base", section="§9.9", title="own", paper="synthetic", metric="accuracy_after",
                versus="warm_start")
    family = _family(CONTROLS, [own], roles=CONTROL_ROLES)
    assert described_claims(family) == (own,)
    [row] = family_power(family, n_claims=1)
    assert row["metric"] == "accuracy_after" and row["n"] == 10
    assert row["sd"] == pytest.approx(pooled_sd([[a - BEFORE for a in BASE]]))
    assert gates(family, own, n_claims=1) == []  # the harm is detected, the other RL seed is not different
