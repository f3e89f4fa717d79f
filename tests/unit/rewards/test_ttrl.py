"""TTRL majority-vote pseudo-labels: golden labels and consensus strength on toy groups, the tie rule,
label-free operation (no gold answer is read), and the collapse diagnostics."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.advantages.grpo import GRPO
from rlvr.registry import build
from rlvr.rewards.consensus import answer_entropy, majority_labels, vote
from rlvr.rewards.ttrl import ttrl_rewards
from rlvr.types import AdvantageInputs, BatchError, Problem, Rollouts


class PoisonAnswer:
    """A gold answer that fails on any use except an identity check (``is None``)."""

    def _boom(self, *args, **kwargs):
        raise AssertionError("a label-free reward read the gold answer")

    __str__ = __repr__ = __eq__ = __hash__ = __bool__ = _boom


def batch(parsed, group_ids, verdict=None, answers=None, logprobs=None) -> Rollouts:
    """A verified batch of N rows, T = 3 tokens, rewards [verdict, format]."""
    n = len(parsed)
    verdict = [0.0] * n if verdict is None else verdict
    answers = [None] * n if answers is None else answers
    problems = [Problem(prompt=f"p{g}", answer=a) for g, a in zip(group_ids, answers)]
    rewards = torch.tensor([[v, 1.0] for v in verdict])  # (N, 2)
    return Rollouts(problems=problems, prompt_ids=torch.zeros(n, 1, dtype=torch.long),
                    prompt_mask=torch.ones(n, 1, dtype=torch.bool),
                    completion_ids=torch.zeros(n, 3, dtype=torch.long),
                    completion_mask=torch.ones(n, 3, dtype=torch.bool),
                    group_ids=torch.tensor(group_ids), rewards=rewards, reward_names=["correct", "format"],
                    rollout_logprobs=logprobs, texts=[f"t{i}" for i in range(n)], parsed=list(parsed))


def test_golden_labels_and_consensus_on_interleaved_groups():
    # Group 0 (rows 0, 2, 4, 6): answers 7, 7, 3, None → ŷ = 7, r = [1, 1, 0, 0], c = 2/4.
    # Group 1 (rows 1, 3, 5, 7): answers 5, 5, 5, 2 → ŷ = 5, r = [1, 1, 1, 0], c = 3/4.
    parsed = ["7", "5", "7", "5", "3", "5", None, "2"]
    gids = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    agrees, strength, labels = majority_labels(parsed, gids)
    assert agrees.tolist() == [True, True, True, True, False, True, False, False]
    assert strength.tolist() == [0.5, 0.75, 0.5, 0.75, 0.5, 0.75, 0.5, 0.75]
    assert labels == ["7", "5"]


def test_tie_rule_first_appearance_or_skip():
    # Answers 2, 5, 5, 2: counts 2:2, 5:2. 'first' → the tied answer seen first, "2": r = [1, 0, 0, 1],
    # c = 2/4; 'skip' → no label: r ≡ 0, c = 0.
    gids = torch.zeros(4, dtype=torch.long)
    assert ttrl_rewards(["2", "5", "5", "2"], gids, ties="first").tolist() == [1.0, 0.0, 0.0, 1.0]
    assert ttrl_rewards(["2", "5", "5", "2"], gids, ties="skip").tolist() == [0.0] * 4
    _, strength, _ = majority_labels(["2", "5", "5", "2"], gids, ties="skip")
    assert strength.tolist() == [0.0] * 4
    assert vote(["5", "2", "2", "5"]) == "5"  # order decides, not the value
    assert vote([None, None]) is None  # no parsed answer: no label


def test_unparsed_group_and_normalised_answers():
    # All unparsed → no label, r ≡ 0. " 7." / "$7$" / "7" normalise to "7" → three agree, c = 3/4.
    assert ttrl_rewards([None, None], torch.zeros(2, dtype=torch.long)).tolist() == [0.0, 0.0]
    assert ttrl_rewards([" 7.", "7", "$7$", "8"], torch.zeros(4, dtype=torch.long)).tolist() == [1, 1, 1, 0]


def test_shaper_rewards_names_and_metrics():
    # One group: answers 7, 7, 3, None; gold "7" with verdict [1, 1, 0, 0].
    out = build("shaper", "ttrl")(batch(["7", "7", "3", None], [4, 4, 4, 4], verdict=[1.0, 1.0, 0.0, 0.0],
                                        answers=["7"] * 4))
    assert out.reward_names == ["ttrl", "format", "correct"]
    assert out.rewards[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert out.rewards[:, 2].tolist() == [1.0, 1.0, 0.0, 0.0]  # the verdict, kept for metrics only
    m = out.meta["shaper_metrics"]
    # Answer distribution {7: 1/2, 3: 1/4, none: 1/4}: H = ½ln2 + 2·¼ln4 = 1.5·ln2.
    assert m["reward/answer_entropy"] == pytest.approx(1.5 * math.log(2))
    assert m["reward/consensus"] == pytest.approx(0.5)
    assert m["reward/answered_frac"] == pytest.approx(0.75)
    assert m["reward/gold_accuracy"] == pytest.approx(0.5) and m["reward/label_accuracy"] == pytest.approx(1.0)


def test_wrong_majority_shows_in_label_accuracy():
    # Majority answer 3 (rows 0, 1) is wrong (verdict 0); the gold-correct minority row gets pseudo-reward 0.
    out = build("shaper", "ttrl")(batch(["3", "3", "7"], [0, 0, 0], verdict=[0.0, 0.0, 1.0], answers=["7"] * 3))
    assert out.rewards[:, 0].tolist() == [1.0, 1.0, 0.0]
    assert out.meta["shaper_metrics"]["reward/label_accuracy"] == 0.0


def test_no_gold_answer_is_read():
    parsed = ["7", "7", "3", "1", "1", "2"]
    gids = [0, 0, 0, 1, 1, 1]
    free = build("shaper", "ttrl")(batch(parsed, gids))  # answer=None everywhere
    poisoned = build("shaper", "ttrl")(batch(parsed, gids, verdict=[1, 0, 1, 0, 1, 0], answers=[PoisonAnswer()] * 6,))
    expected = [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    assert free.rewards[:, 0].tolist() == expected and poisoned.rewards[:, 0].tolist() == expected
    assert "reward/gold_accuracy" not in free.meta["shaper_metrics"]  # no gold, no gold metric


def test_full_agreement_gives_zero_advantage_and_zero_entropy():
    out = build("shaper", "ttrl")(batch(["4", "4", "4"], [0, 0, 0]))
    assert out.rewards[:, 0].tolist() == [1.0, 1.0, 1.0]
    adv = GRPO()(AdvantageInputs(rewards=out.rewards, mask=out.completion_mask, group_ids=out.group_ids)).advantages
    assert torch.equal(adv, torch.zeros_like(adv))
    assert answer_entropy(["4", "4", "4"]) == 0.0 and out.meta["shaper_metrics"]["reward/answer_entropy"] == 0.0


def test_needs_parsed_answers():
    b = batch(["1"], [0])
    b.parsed = []
    with pytest.raises(BatchError, match="parsed"):
        build("shaper", "ttrl")(b)
    with pytest.raises(ValueError, match="ties"):
        build("shaper", "ttrl", ties="random")
