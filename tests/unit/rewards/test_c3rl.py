"""C3RL: the confidence format, the reward table by hand (docs/methods.md §2.28 (d)), the shaper on a batch."""

from __future__ import annotations

import pytest
import torch

from rlvr.registry import build
from rlvr.rewards.answer import parse_confidence, strip_confidence
from rlvr.rewards.c3rl import C3RLConfig, c3rl_reward
from rlvr.types import Problem, Rollouts


@pytest.mark.parametrize("text, expected", [
    ("... answer: 17 confidence: 0.8", 0.8),
    ("answer: 17 Confidence=80%", 0.8),
    ("answer: 17 conf: 75", 0.75),  # a bare value in (1, 100] is a percentage
    ("7+5=12;#12confidence:.9", 0.9),  # glued to the answer, leading dot
    ("confidence: 1", 1.0),
    ("confidence: 0.2 wait, confidence: 0.7", 0.7),  # the last statement wins
    ("confidence: 150", None),  # out of range = not stated
    ("answer: 17", None),
    ("unconfident 0.3", None),  # 'conf' inside a word does not count
])
def test_parse_confidence(text, expected):
    got = parse_confidence(text)
    assert got == pytest.approx(expected) if expected is not None else got is None


def test_strip_confidence_keeps_the_answer():
    assert strip_confidence(";#632 confidence: 0.8") == ";#632"


def _terms(correct, conf, stated, acc_ref, has_ref, **cfg):
    n = len(correct)
    return c3rl_reward(torch.tensor(correct), torch.tensor(conf), torch.tensor(stated), torch.ones(n, dtype=torch.bool),
                       torch.tensor(acc_ref), torch.tensor(has_ref), C3RLConfig(**cfg))


def test_reward_table_by_hand():
    # beta = alpha = 0.1, tau = 0.5, match at c >= 0.5; acc_ref 0.2 = hard, 0.8 = easy.
    # row 0: correct, c=0.9, hard  -> 0.9 + 0.1 (format) + 0.1 (match) + 0.1 (gain)   = 1.2   (docs/methods.md §2.28 test 1)
    # row 1: wrong,   c=0.1, easy  -> 0 + 0.1 + 0.1 (match: low c, wrong) - 0.1 (regr) = 0.1  (test 2)
    # row 2: wrong,   c=0.9, hard  -> 0.1 - 0.1 (mismatch) + 0                         = 0.0   (test 3)
    # row 3: wrong,   c=0.9, easy  -> 0.1 - 0.1 - 0.1                                  = -0.1  (test 3, easy)
    # row 4: correct, none stated, easy -> 0.9 + 0 (no format) - 0.1 (missing = mismatch) + 0 = 0.8
    # row 5: correct, c=0.3, no tag -> 0.9 + 0.1 - 0.1 (c < 0.5 claims wrong) + 0 (no tag) = 0.9
    t = _terms([True, False, False, False, True, True], [0.9, 0.1, 0.9, 0.9, 0.0, 0.3],
               [True, True, True, True, False, True], [0.2, 0.8, 0.2, 0.8, 0.8, 0.0],
               [True, True, True, True, True, False])
    assert torch.allclose(t["total"], torch.tensor([1.2, 0.1, 0.0, -0.1, 0.8, 0.9]), atol=1e-6)
    assert torch.allclose(t["reference"], torch.tensor([0.1, -0.1, 0.0, -0.1, 0.0, 0.0]))
    assert torch.allclose(t["correctness"], torch.tensor([1.0, 0.1, 0.1, 0.1, 0.9, 1.0]))


def test_continuous_calibration_and_skip_missing():
    # continuous: beta*(1 - 2|c - y|): correct c=0.8 -> 0.1*0.6 = 0.06; wrong c=0.8 -> 0.1*(1-1.6) = -0.06;
    # missing='skip' gives R_cal = 0 to the row that states nothing (no format credit either): 0.9.
    t = _terms([True, False, True], [0.8, 0.8, 0.0], [True, True, False], [0.0, 0.0, 0.0], [False] * 3,
               calibration="continuous", missing="skip")
    assert torch.allclose(t["calibration"], torch.tensor([0.06, -0.06, 0.0]), atol=1e-6)
    assert torch.allclose(t["total"], torch.tensor([1.06, 0.04, 0.9]), atol=1e-6)


def test_binary_match_threshold_is_inclusive():
    # c = 0.5 exactly claims 'correct': a correct row matches (+beta), a wrong one does not (-beta).
    t = _terms([True, False], [0.5, 0.5], [True, True], [0.0, 0.0], [False, False])
    assert torch.allclose(t["calibration"], torch.tensor([0.1, -0.1]))


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="calibration"):
        C3RLConfig(calibration="isotonic")
    with pytest.raises(ValueError, match="ref_source"):
        C3RLConfig(ref_source="oracle")


def _batch(texts, correct, group_ids, tags=None):
    n = len(texts)
    problems = [Problem("1+1=", "2", meta={} if tags is None or tags[i] is None else {"ref_accuracy": tags[i]})
                for i in range(n)]
    fmt = [1.0] * n
    return Rollouts(problems=problems, prompt_ids=torch.ones(n, 2, dtype=torch.long),
                    prompt_mask=torch.ones(n, 2, dtype=torch.bool), completion_ids=torch.ones(n, 3, dtype=torch.long),
                    completion_mask=torch.ones(n, 3, dtype=torch.bool), group_ids=torch.tensor(group_ids),
                    rewards=torch.tensor([[c, f] for c, f in zip(correct, fmt)]), reward_names=["correct", "format"],
                    texts=list(texts), parsed=["2"] * n)


def test_shaper_rewrites_objective_zero_and_keeps_the_verdict():
    shaper = build("shaper", "c3rl")
    batch = _batch(["#2 confidence: 0.9", "#3 confidence: 0.9", "#2", "#3 conf 10%"], [1.0, 0.0, 1.0, 0.0],
                   [0, 0, 1, 1], tags=[0.2, 0.8, None, None])
    out = shaper(batch)
    # row 0: 0.9+0.1+0.1+0.1 = 1.2; row 1: 0.1-0.1-0.1 = -0.1; row 2: 0.9-0.1 = 0.8 (no confidence, no tag);
    # row 3: 0.1+0.1 = 0.2 (c=0.1 on a wrong answer matches; no tag)
    assert torch.allclose(out.rewards[:, 0], torch.tensor([1.2, -0.1, 0.8, 0.2]), atol=1e-6)
    assert out.reward_names == ["c3rl", "format", "correct"]
    assert torch.equal(out.rewards[:, 2], torch.tensor([1.0, 0.0, 1.0, 0.0]))  # the verdict, logged
    assert torch.equal(out.rewards[:, 1], batch.rewards[:, 1])  # the task's own objectives untouched
    assert torch.equal(batch.rewards[:, 0], torch.tensor([1.0, 0.0, 1.0, 0.0]))  # input not modified
    m = out.meta["shaper_metrics"]
    assert m["reward/c3rl_stated_frac"] == 0.75 and m["reward/c3rl_correct"] == 0.5
    # Brier over the 3 stating rows: (0.9-1)^2 + (0.9-0)^2 + (0.1-0)^2 = 0.01 + 0.81 + 0.01 = 0.83; / 3
    assert m["reward/c3rl_brier"] == pytest.approx(0.83 / 3)
    assert torch.allclose(out.row_stats["stated_confidence"], torch.tensor([0.9, 0.9, float("nan"), 0.1]),
                          equal_nan=True)


def test_shaper_without_any_confidence_does_not_crash():
    out = build("shaper", "c3rl")(_batch(["17", "3", "x", ""], [1.0, 0.0, 0.0, 1.0], [0, 0, 1, 1]))
    # every row: no format credit, -beta; no tags: R = 0.9*correct - 0.1
    assert torch.allclose(out.rewards[:, 0], torch.tensor([0.8, -0.1, -0.1, 0.8]), atol=1e-6)
    assert "reward/c3rl_brier" not in out.meta["shaper_metrics"]


def test_group_reference_source():
    # group 0 correctness [1, 0, 0, 0]: acc 0.25 < 0.5, hard -> the correct row gains +alpha;
    # group 1 [1, 1, 1, 0]: acc 0.75, easy -> the wrong row loses alpha. No confidence stated anywhere.
    out = build("shaper", "c3rl", ref_source="group")(
        _batch([""] * 8, [1.0, 0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 1, 1, 1, 1]))
    expected_ref = torch.tensor([0.1, 0, 0, 0, 0, 0, 0, -0.1])
    base = 0.9 * torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 0]) - 0.1
    assert torch.allclose(out.rewards[:, 0], base + expected_ref, atol=1e-6)
