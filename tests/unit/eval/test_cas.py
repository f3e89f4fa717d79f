"""CAS's stopping rule and vote on a deterministic fake sampler; calibration metrics by hand."""

from __future__ import annotations

import pytest

from rlvr.eval.calibration import brier_score, calibration_metrics, expected_calibration_error
from rlvr.eval.cas import (CASConfig, Sample, equal_budget, majority_correct, run_cas, summarize,
                           weighted_vote)
from rlvr.types import Score


class FakeSampler:
    """Problem i's r-th draw is table[i][r]; records every call's indices."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def __call__(self, indices, round_):
        self.calls.append(list(indices))
        return [self.table[i][round_] for i in indices]


def S(answer, c, correct=False):
    return Sample(answer, c, correct)


TABLE = [
    [S("7", 0.25), S("8", 0.75, True), S("7", 0.25), S("7", 0.25)],  # weights exact in binary
    [S("5", 0.95, True), S("6", 0.1), S("6", 0.1), S("6", 0.1)],  # confident first sample
    [S("1", 0.5, True), S("1", 0.6, True), S("2", 0.9), S("2", 0.9)],  # agreeing second sample
]


def test_tau_stop_zero_draws_exactly_one_sample():
    sampler = FakeSampler(TABLE)
    out = run_cas(sampler, 3, CASConfig(tau_stop=0.0, tau_vote=0.5, max_extra=3))
    assert [o.num_samples for o in out] == [1, 1, 1] and sampler.calls == [[0, 1, 2]]
    assert [o.answer for o in out] == ["7", "5", "1"] and [o.stop for o in out] == ["confident"] * 3


def test_no_early_stop_votes_over_all_n_plus_one_samples():
    # tau_stop > 1 and tau_vote >= 1: never stops early, so N + 1 = 3 samples each (max_extra = 2).
    # problem 0: W_7 = 0.25 + 0.25 = 0.5, W_8 = 0.75 -> "8" (a plain count would say "7"), and 8 is correct.
    # problem 1: W_5 = 0.95 beats W_6 = 0.1 + 0.1 (two votes against one). problem 2: W_1 = 1.1, W_2 = 0.9 -> "1".
    sampler = FakeSampler(TABLE)
    out = run_cas(sampler, 3, CASConfig(tau_stop=1.01, tau_vote=1.0, max_extra=2))
    assert [o.num_samples for o in out] == [3, 3, 3] and len(sampler.calls) == 3
    assert [o.answer for o in out] == ["8", "5", "1"] and [o.stop for o in out] == ["budget"] * 3
    assert [o.correct for o in out] == [True, True, True]
    assert majority_correct(out[0].samples) is False  # plain majority picks "7"
    assert majority_correct(out[1].samples) is False  # and "6" here


def test_confident_and_vote_stops_sample_only_the_unsure():
    # tau_stop 0.9: problem 1 (c = 0.95) stops after 1 sample. tau_vote 0.7:
    # problem 2 after 2 samples: W_1 = 1.1 of 1.1 -> share 1.0 > 0.7, stops ("vote");
    # problem 0 after 2: W_8 = 0.75 / 1.0 = 0.75 > 0.7, stops too.
    sampler = FakeSampler(TABLE)
    out = run_cas(sampler, 3, CASConfig(tau_stop=0.9, tau_vote=0.7, max_extra=3))
    assert sampler.calls == [[0, 1, 2], [0, 2]]
    assert [o.num_samples for o in out] == [2, 1, 2] and [o.stop for o in out] == ["vote", "confident", "vote"]
    assert [o.answer for o in out] == ["8", "5", "1"]


def test_vote_share_below_threshold_keeps_sampling():
    # problem 0 with tau_vote 0.8: after 2 samples share 0.75 (no stop); after 3: W_7 = 0.5, W_8 = 0.75,
    # share 0.6 (no stop); after 4: W_7 = 0.75, W_8 = 0.75 -> share 0.5, budget; tie -> first seen "7".
    out = run_cas(FakeSampler(TABLE[:1]), 1, CASConfig(tau_stop=0.95, tau_vote=0.8, max_extra=3))
    assert out[0].num_samples == 4 and out[0].stop == "budget" and out[0].answer == "7"


def test_weighted_vote_rules():
    assert weighted_vote([S(None, 0.9), S("3", 0.2)]) == ("3", 1.0)  # unparsed answers do not vote
    assert weighted_vote([S("a", 0.0), S("b", 0.0), S("b", 0.0)]) == ("b", pytest.approx(2 / 3))  # counts
    assert weighted_vote([S(None, 0.5)]) == (None, 0.0)


def test_equal_budget_and_summary():
    assert equal_budget(7, 3) == [3, 2, 2] and sum(equal_budget(10, 4)) == 10
    out = run_cas(FakeSampler(TABLE), 3, CASConfig(tau_stop=0.9, tau_vote=0.7, max_extra=3))
    summary = summarize(out, [True, False, False])
    assert summary["budget/total_samples"] == 5.0 and summary["cas/mean_samples"] == pytest.approx(5 / 3)
    assert summary["cas/accuracy"] == pytest.approx(3 / 3) and summary["majority/accuracy"] == pytest.approx(1 / 3)
    assert summary["cas/stop_vote"] == pytest.approx(2 / 3) and summary["cas/stop_budget"] == 0.0


def test_required_options():
    with pytest.raises(ValueError, match="required"):
        CASConfig(tau_stop=0.9)
    with pytest.raises(ValueError, match="confidence"):
        CASConfig(tau_stop=0.9, tau_vote=0.5, max_extra=1, confidence="verbal")


def test_brier_and_ece_by_hand():
    # Brier: ((0.9 - 1)^2 + (0.2 - 0)^2) / 2 = (0.01 + 0.04) / 2 = 0.025
    assert brier_score([0.9, 0.2], [1, 0]) == pytest.approx(0.025)
    conf, y = [0.1, 0.3, 0.8, 0.9], [0, 1, 1, 1]
    # 2 bins: [0, .5): c {0.1, 0.3} mean 0.2, acc 0.5 -> 2/4 * 0.3 = 0.15; [.5, 1]: mean 0.85, acc 1 -> 2/4 * 0.15
    assert expected_calibration_error(conf, y, num_bins=2) == pytest.approx(0.15 + 0.075)
    # 4 bins: {0.1} acc 0 -> 0.1/4; {0.3} acc 1 -> 0.7/4; empty; {0.8, 0.9} -> 2/4 * 0.15
    assert expected_calibration_error(conf, y, num_bins=4) == pytest.approx(0.025 + 0.175 + 0.075)
    assert expected_calibration_error([1.0], [1], num_bins=3) == 0.0  # c = 1 lands in the last bin
    with pytest.raises(ValueError, match="num_bins"):
        expected_calibration_error(conf, y, num_bins=0)


def test_calibration_metrics_only_over_stated_confidence():
    texts = ["#4 confidence: 0.9", "#5 confidence: 0.2", "#6"]
    scores = [Score(1.0), Score(0.0), Score(1.0)]
    m = calibration_metrics(texts, scores, num_bins=10)
    assert m["calibration/stated_frac"] == pytest.approx(2 / 3) and m["calibration/brier"] == pytest.approx(0.025)
    assert calibration_metrics(["#6"], [Score(1.0)], num_bins=10) == {}
