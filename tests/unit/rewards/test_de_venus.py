"""DE-Venus online transforms (docs/methods.md §2.2): mixed gold / pseudo rewards, low-confidence filter."""

from __future__ import annotations

import random

import pytest
import torch

from rlvr import BatchError, Problem, Rollouts, build
from rlvr.types import AdvantageInputs


def batch(answers: list[str | None], parsed: list[str | None], verdict: list[float], groups: list[int],
          sources: dict[str, str] | None = None) -> Rollouts:
    """Rows of problems ``q<group>`` (gold ``answers[group]``), with parsed answers and verdicts."""
    n = len(parsed)
    sources = sources or {}
    problems = [Problem(f"q{g}", answers[g], uid=f"q{g}",
                        meta={"supervision": {"source": sources.get(f"q{g}", "gold"), "confidence": 0.9}}
                        if f"q{g}" in sources else {}) for g in groups]
    return Rollouts(problems=problems, prompt_ids=torch.zeros(n, 1, dtype=torch.long),
                    prompt_mask=torch.ones(n, 1, dtype=torch.bool), completion_ids=torch.zeros(n, 3, dtype=torch.long),
                    completion_mask=torch.ones(n, 3, dtype=torch.bool), group_ids=torch.tensor(groups),
                    rewards=torch.tensor(verdict)[:, None], reward_names=["correct"], texts=["x"] * n,
                    parsed=parsed)


def test_mixed_batch_gold_kept_unlabelled_pseudo_labelled():
    # Group 0 (gold "4"): verdicts [1, 0, 1, 0] stay. Group 1 (no answer): parsed 7, 7, 8, None →
    # ŷ = "7", c = 2/4 = 0.5, rewards 1[a = ŷ] = [1, 1, 0, 0]. Confidence: gold 1, pseudo 0.5.
    b = batch(["4", None], ["4", "5", "4", "5", "7", "7", "8", None], [1, 0, 1, 0, 0, 0, 0, 0],
              [0, 0, 0, 0, 1, 1, 1, 1])
    out = build("shaper", "de_venus")(b)
    assert out.rewards[:, 0].tolist() == [1, 0, 1, 0, 1, 1, 0, 0]
    assert out.rewards.shape == (8, 1) and out.reward_names == ["correct"]
    assert out.row_stats["target_confidence"].tolist() == [1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5]
    notes = out.meta["supervision_groups"]
    assert [(n["uid"], n["majority"], n["consensus"], n["labelled"]) for n in notes] == \
        [("q0", "4", 0.5, True), ("q1", "7", 0.5, False)]
    m = out.meta["shaper_metrics"]
    assert m["reward/pseudo_frac"] == 0.5 and m["reward/target_confidence"] == 0.75


def test_all_identical_pseudo_answers_give_reward_one_and_zero_advantage():
    # docs/methods.md §2.2 test 4: every answer "3" → r ≡ 1 → GRPO advantage 0.
    out = build("shaper", "de_venus")(batch([None], ["3"] * 4, [0.0] * 4, [0] * 4))
    assert out.rewards[:, 0].tolist() == [1.0] * 4
    adv = build("advantage", "grpo")(AdvantageInputs(rewards=out.rewards, mask=out.completion_mask,
                                                     group_ids=out.group_ids)).advantages
    assert torch.equal(adv, torch.zeros_like(adv))


def test_fully_labelled_batch_is_untouched():
    b = batch(["1", "2"], ["1", "9", "2", "2"], [1, 0, 1, 1], [0, 0, 1, 1])
    out = build("shaper", "de_venus")(b)
    assert torch.equal(out.rewards, b.rewards) and out.reward_names == b.reward_names
    assert out.meta["shaper_metrics"]["reward/pseudo_frac"] == 0.0


def test_contradiction_flag_and_corrected_confidence():
    # Gold "4"; majority "5" (3 of 4), all three scored wrong → contradicts. A corrected problem's
    # confidence comes from its meta (0.9). Group 1: majority "6" scored right → no contradiction.
    b = batch(["4", "6"], ["5", "5", "5", "4", "6", "6", "1", "2"], [0, 0, 0, 1, 1, 1, 0, 0],
              [0, 0, 0, 0, 1, 1, 1, 1], sources={"q1": "corrected"})
    out = build("shaper", "de_venus")(b)
    assert [n["contradicts"] for n in out.meta["supervision_groups"]] == [True, False]
    assert out.row_stats["target_confidence"].tolist() == pytest.approx([1.0] * 4 + [0.9] * 4)  # float32
    assert out.meta["shaper_metrics"]["reward/corrected_frac"] == 0.5


def test_pseudo_labels_off_keeps_verifier_zero():
    out = build("shaper", "de_venus", pseudo_labels=False)(batch([None], ["3"] * 2, [0.0, 0.0], [0, 0]))
    assert out.rewards[:, 0].tolist() == [0.0, 0.0]


def test_shaper_needs_parsed_answers():
    b = batch([None], ["3"], [0.0], [0])
    b.parsed = []
    with pytest.raises(BatchError, match="parsed"):
        build("shaper", "de_venus")(b)


def test_filter_tau_zero_is_identity_and_drops_whole_low_confidence_groups():
    b = build("shaper", "de_venus")(batch(["4", None, None], ["4", "4", "7", "7", "8", "9"],
                                          [1, 0, 0, 0, 0, 0], [0, 0, 1, 1, 2, 2]))
    # confidences: group 0 gold 1; group 1 "7","7" → 1; group 2 "8","9" → 0.5.
    same = build("filter", "de_venus", tau_c=0.0)(b)
    assert same.num_rows == 6 and torch.equal(same.rewards, b.rewards)
    kept = build("filter", "de_venus", tau_c=0.6)(b)
    assert kept.group_ids.tolist() == [0, 0, 1, 1]
    assert kept.row_stats["target_confidence"].tolist() == [1.0] * 4
    m = kept.meta["shaper_metrics"]
    assert (m["filter/low_confidence_kept_groups"], m["filter/low_confidence_groups"]) == (2.0, 3.0)


def test_filter_drops_only_whole_groups_on_random_batches():
    rng = random.Random(0)
    for trial in range(30):
        groups = [rng.randrange(5) for _ in range(12)]  # non-contiguous, uneven groups
        answers = [None if rng.random() < 0.6 else "1" for _ in range(5)]
        parsed = [rng.choice(["1", "2", "3", None]) for _ in groups]
        b = build("shaper", "de_venus")(batch(answers, parsed, [float(p == "1") for p in parsed], groups))
        out = build("filter", "de_venus", tau_c=rng.choice([0.3, 0.5, 0.7]))(b)
        kept = set(out.group_ids.tolist())
        for g in set(groups):  # a group is either entirely kept or entirely dropped
            assert (groups.count(g) == out.group_ids.tolist().count(g)) == (g in kept)
            assert out.group_ids.tolist().count(g) in (0, groups.count(g))


def test_filter_reads_ttrl_consensus_and_requires_confidence():
    b = batch([None], ["1", "2"], [0, 0], [0, 0])
    b.row_stats["consensus"] = torch.tensor([0.5, 0.5])
    assert build("filter", "de_venus", tau_c=0.6)(b).num_rows == 0
    b.row_stats.pop("consensus")
    with pytest.raises(BatchError, match="target_confidence"):
        build("filter", "de_venus", tau_c=0.6)(b)
    with pytest.raises(Exception, match="tau_c is required"):
        build("filter", "de_venus")
