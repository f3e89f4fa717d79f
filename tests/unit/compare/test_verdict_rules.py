"""Golden tests of the rules of issue 47 on tiny synthetic families: the moved-from-start gate, *ruled out*
against *inconclusive*, the exact sign-flip test, the committed Holm family and the row's notes.

As in test_verdicts.py, per-seed values are written out so every interval's side of its threshold is known
before the test runs.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from rlvr.compare.claims import Claim
from rlvr.compare.findings import _claim_row, holm_family
from rlvr.compare.verdict_tests import EXACT_UP_TO, one_sided_flip_p, sign_flip_claim, two_sided_flip_p
from rlvr.compare.verdicts import Family, check_holm_family, gates, judge, min_updates_of, ruled_out
from rlvr.train.config import ConfigError

SEEDS = list(range(10))
BEFORE = 0.30
BASE = [0.40, 0.42, 0.41, 0.43, 0.40, 0.44, 0.41, 0.42, 0.43, 0.40]  # gain +0.116, every seed up
WIGGLE = [0.000, 0.002, 0.001, 0.003, 0.000, 0.002, 0.001, 0.003, 0.000, 0.002]


def _records(method: str, after: list[float], steps: int = 100) -> list[dict]:
    return [{"method": method, "seed": s, "status": "done", "accuracy_before": BEFORE, "accuracy_after": a,
             "steps": steps} for s, a in zip(SEEDS, after)]


def _family(methods: dict[str, tuple[list[float], int]], claims: list[Claim], name: str = "toy") -> Family:
    """A baseline ``base`` (100 updates), a harmed positive control and the given methods: (after, steps)."""
    harmed = [v - 0.06 + w for v, w in zip(BASE, WIGGLE)]
    records = _records("base", BASE) + _records("harmed", harmed)
    for method, (after, steps) in methods.items():
        records += _records(method, after, steps)
    roles = {"base": "baseline", "harmed": "positive_control", **{m: "method" for m in methods}}
    return Family(name=name, baseline="base", claims=tuple(claims), roles=roles, records=records, seeds=tuple(SEEDS))


def _claim(method: str, **kw) -> Claim:
    return Claim(method=method, section="§9.9", title=method, paper="synthetic", metric="accuracy_after", **kw)


# --- the moved-from-start gate ------------------------------------------------------------------

def test_a_method_that_never_left_its_start_is_not_testable_though_the_paired_test_says_opposite():
    # stuck: after = before ± 0.001 on every seed, so its own change is 0 within its interval; against a
    # baseline that gained 0.116 the paired test alone reads the baseline's gain backwards as "opposite"
    stuck = [BEFORE + (0.001 if i % 2 else -0.001) for i in SEEDS]
    row = judge([_family({"stuck": (stuck, 100)}, [_claim("stuck")])])[0]
    assert row["verdict"] == "not testable here"
    assert row["why"].startswith("did not move from its start: its own accuracy_after change +0.0000 [")
    assert "(the paired test alone: opposite" in row["why"]


def test_too_few_updates_against_the_default_and_a_registered_minimum():
    moved = [v + 0.001 + w for v, w in zip(BASE, WIGGLE)]  # moved as far as the baseline
    fam = _family({"short": (moved, 20), "enough": (moved, 25)}, [_claim("short"), _claim("enough")])
    assert min_updates_of(fam, fam.claims[0]) == 25  # 25 % of the baseline's 100
    failed = gates(fam, fam.claims[0], n_claims=2)
    assert failed == ["too few updates: 20 optimizer updates, below the minimum of 25, 25 % of base's 100"]
    assert gates(fam, fam.claims[1], n_claims=2) == []
    registered = _family({"short": (moved, 20)}, [_claim("short", min_updates=10)])
    assert gates(registered, registered.claims[0], n_claims=1) == []


def test_the_row_states_each_arms_updates_where_they_differ():
    moved = [v + 0.001 + w for v, w in zip(BASE, WIGGLE)]
    rows = judge([_family({"short": (moved, 40), "same": (moved, 100)}, [_claim("short"), _claim("same")])])
    text = {r["claim"].method: _claim_row(r) for r in rows}
    assert "Updates at an equal sample budget: short 40, base 100." in text["short"]
    assert "Updates at an equal sample budget" not in text["same"]


def test_a_claim_against_another_method_than_the_papers_says_so():
    moved = [v + 0.001 + w for v, w in zip(BASE, WIGGLE)]
    row = judge([_family({"m": (moved, 100)}, [_claim("m", paper_baseline="VAPO, a value-based method")])])[0]
    assert "The paper's comparison is against VAPO, a value-based method; this row is against base" in _claim_row(row)


# --- ruled out against inconclusive -------------------------------------------------------------

def test_ruled_out_needs_the_interval_to_exclude_the_effect_of_interest():
    # +0.01 ± 0.03 alternating: paired t p ≈ 0.34, 95 % interval [-0.013, +0.033]. The default effect of
    # interest (0.25 × the baseline's gain = 0.029) is inside it: inconclusive. The paper's +0.039 is not.
    swing = [v + 0.01 + (0.03 if i % 2 else -0.03) for i, v in enumerate(BASE)]
    default = judge([_family({"m": (swing, 100)}, [_claim("m")])])[0]
    assert default["verdict"] == "inconclusive" and "does not exclude +0.029 (0.25 × the baseline's gain)" in \
        default["why"]
    paper = judge([_family({"m": (swing, 100)}, [_claim("m", paper_effect=0.039)])])[0]
    assert paper["verdict"] == "ruled out" and "excludes +0.039 (the paper's effect)" in paper["why"]


@pytest.mark.parametrize("interval, direction, margin, effect, expected", [
    ((-0.01, 0.02), "better", None, 0.03, True),
    ((-0.01, 0.04), "better", None, 0.03, False),
    ((-0.01, 0.02), "better", None, None, False),  # no effect of interest: never ruled out
    ((0.005, 0.02), "better", None, 0.03, False),  # wholly above 0: small, but the paper's way
    ((-0.09, -0.06), "not_worse", 0.05, None, True),  # wholly worse than −margin
    ((-0.09, -0.04), "not_worse", 0.05, None, False),
    ((0.06, 0.09), "matches", 0.05, None, True),  # wholly outside ±margin
    ((-0.04, 0.03), "matches", 0.05, None, False),
])
def test_ruled_out_by_direction(interval, direction, margin, effect, expected):
    assert ruled_out(interval, direction, margin, effect) is expected


# --- the exact sign-flip test -------------------------------------------------------------------

def test_twelve_positive_seeds_give_the_exact_two_sided_floor():
    assert two_sided_flip_p([0.01 * (i + 1) for i in range(12)]) == 2 / 4096
    flip = sign_flip_claim([0.01] * 12, "better", None)
    assert flip == {"p": 2 / 4096, "floor": 2 / 4096, "exact": True}


def test_meet_in_the_middle_counts_equal_brute_force_enumeration():
    rng = random.Random(47)
    for n in (1, 2, 5, 9, 13):
        xs = [round(rng.uniform(-0.05, 0.05), 3) for _ in range(n)]
        xs[0] = 0.0 if n > 3 else xs[0]  # a tie
        total, signs = sum(xs), list(itertools.product((1, -1), repeat=n))
        sums = [sum(s * x for s, x in zip(sign, xs)) for sign in signs]
        assert two_sided_flip_p(xs) == sum(abs(v) >= abs(total) - 1e-9 for v in sums) / 2 ** n
        assert one_sided_flip_p(xs) == sum(v >= total - 1e-9 for v in sums) / 2 ** n


def test_twenty_seven_seeds_are_exact_and_forty_one_are_estimated():
    assert two_sided_flip_p([0.001] * 27) == 2 / 2 ** 27  # enumerated by halves, not sampled
    assert sign_flip_claim([0.001] * EXACT_UP_TO, "better", None)["exact"] is True
    estimated = sign_flip_claim([0.001] * (EXACT_UP_TO + 1), "better", None)
    assert estimated["exact"] is False and estimated["p"] == 1 / 20_001  # only the observed assignment


# --- the Holm family is fixed in advance -------------------------------------------------------------

def _two_claim_rows():
    good = [v + 0.05 + w for v, w in zip(BASE, WIGGLE)]
    return _family({"a": (good, 100), "b": (good, 100)}, [_claim("a"), _claim("b")])


def test_judge_errors_when_the_holm_family_misses_or_adds_a_claim():
    fam = _two_claim_rows()
    rows = judge([fam], holm_family=["toy/a", "toy/b"])
    assert rows[0]["holm"]["m"] == 2
    with pytest.raises(ConfigError, match=r"claims with a p-value that f\.yaml does not list: \['toy/b'\]"):
        judge([fam], holm_family=["toy/a"], where="f.yaml")
    with pytest.raises(ConfigError, match=r"listed in f\.yaml but not a claim with a p-value: \['toy/c'\]"):
        judge([fam], holm_family=["toy/a", "toy/b", "toy/c"], where="f.yaml")
    with pytest.raises(ConfigError, match=r"listed twice in f\.yaml: \['toy/a'\]"):
        check_holm_family(judge([fam]), ["toy/a", "toy/a", "toy/b"], "f.yaml")


def test_the_holm_family_file_must_exist_and_list_family_slash_method(tmp_path: Path):
    with pytest.raises(ConfigError, match="holm_family.yaml does not exist"):
        holm_family(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "holm_family.yaml").write_text("claims: [toy]\n")
    with pytest.raises(ConfigError, match="'claims' must be a list of 'family/method' names"):
        holm_family(tmp_path)
    (tmp_path / "configs" / "holm_family.yaml").write_text("claims: [toy/a, toy/b]\n")
    assert holm_family(tmp_path) == ["toy/a", "toy/b"]


def test_the_committed_holm_family_is_every_committed_claim_with_a_p():
    root = Path(__file__).resolve().parents[3]
    from rlvr.compare.findings import load_families

    judge(load_families(root), holm_family=holm_family(root))  # raises on any difference
