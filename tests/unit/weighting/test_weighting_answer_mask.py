"""answer_mask: zeroed answer-span advantages, identity without a span, span location from text and ids."""

from __future__ import annotations

import pytest
import torch

from rlvr.models import build_char_tokenizer
from rlvr.registry import build, names
from rlvr.types import BatchError, LossInputs
from rlvr.weighting import WeightingInputs
from rlvr.weighting.answer_mask import AnswerMask, AnswerMaskConfig, answer_mask_from_ids, answer_token_mask

ADV = torch.tensor([[1.5, 1.5, 1.5, 1.5], [-0.5, -0.5, -0.5, 0.0]])
MASK = torch.tensor([[True, True, True, True], [True, True, True, False]])
SPAN = torch.tensor([[False, False, True, True], [False, True, True, True]])


def test_registered_and_asks_for_the_span():
    assert "answer_mask" in names("weighting")
    w = build("weighting", "answer_mask")
    assert w.needs_answer_mask is True
    assert (w.config.span, w.config.marker) == ("after_marker", "#")


def test_golden_answer_tokens_zeroed():
    # row 0: span on tokens 2, 3 → [1.5, 1.5, 0, 0]; row 1: span on 1..3 → [−0.5, 0, 0, 0]
    # (token 3 is untrained and already 0; the span keeps it 0).
    out = AnswerMask()(WeightingInputs(advantages=ADV, mask=MASK, answer_mask=SPAN))
    assert out.advantages.tolist() == [[1.5, 1.5, 0.0, 0.0], [-0.5, 0.0, 0.0, 0.0]]
    # metrics over the 7 trained tokens: span tokens 2 + 2 = 4 → 4/7; non-zero advantages zeroed: 4/7
    assert out.metrics["answer_token_frac"].item() == pytest.approx(4 / 7)
    assert out.metrics["answer_zeroed_frac"].item() == pytest.approx(4 / 7)


def test_all_false_span_is_identity():
    out = AnswerMask()(WeightingInputs(advantages=ADV, mask=MASK, answer_mask=torch.zeros(2, 4, dtype=torch.bool)))
    assert torch.equal(out.advantages, ADV)
    assert out.metrics["answer_token_frac"].item() == 0.0


def test_missing_or_bad_answer_mask_is_a_clear_error():
    with pytest.raises(BatchError, match="answer_mask"):
        AnswerMask()(WeightingInputs(advantages=ADV, mask=MASK))
    with pytest.raises(BatchError, match="bool"):
        AnswerMask()(WeightingInputs(advantages=ADV, mask=MASK, answer_mask=SPAN.float()))
    with pytest.raises(ValueError, match="span"):
        AnswerMaskConfig(span="last_line")


def test_policy_gradient_is_exactly_zero_on_the_answer_span():
    # docs/methods.md §2.13 (d)1 through ppo_clip: d loss / d log π is −A·ρ (unclipped, ρ = 1) → 0 where A′ = 0.
    adv = AnswerMask()(WeightingInputs(advantages=ADV, mask=MASK, answer_mask=SPAN)).advantages
    logp = torch.full((2, 4), -1.0, requires_grad=True)
    loss = build("loss", "ppo_clip")(LossInputs(logprobs=logp, old_logprobs=torch.full((2, 4), -1.0),
                                                advantages=adv, mask=MASK))
    (grad,) = torch.autograd.grad((loss.per_token * MASK).sum(), logp)
    assert (grad[SPAN] == 0).all()
    assert grad.tolist()[0][:2] == [-1.5, -1.5] and grad[1, 0].item() == 0.5  # reasoning keeps its credit


# --- answer_token_mask ------------------------------------------------------------------------

def test_after_marker_marks_last_marker_to_end():
    rows = [list("3+4=7;#7"), list("1#2;#12"), list("no answer")]
    out = answer_token_mask(rows)
    assert out.shape == (3, 9)  # T = longest row
    assert out[0].tolist() == [False] * 6 + [True, True] + [False]  # '#', '7'; padding False
    assert out[1].tolist() == [False] * 4 + [True] * 3 + [False] * 2  # the LAST '#', not the first
    assert not out[2].any()


def test_multi_char_tokens_and_multi_token_marker():
    # tokens 'ab', 'c#1', '2': the marker lies inside token 1 → tokens 1, 2
    assert answer_token_mask([["ab", "c#1", "2"]]).tolist() == [[False, True, True]]
    # marker '####' split over tokens 1 and 2 → from token 1 (its first character) on
    assert answer_token_mask([["x", "##", "##", " 5"]], marker="####").tolist() == [[False, True, True, True]]
    # an empty piece after the answer (a special token) is in the span; explicit length pads
    assert answer_token_mask([["#", "5", ""]], length=5).tolist() == [[True, True, True, False, False]]


def test_boxed_span():
    # the last \boxed{...}, nested braces matched: tokens 2..5; trailing text excluded
    row = ["so ", "\\boxed{1}", " then ", "\\boxed{", "{2}", "}", " done"]
    assert answer_token_mask([row], span="boxed").tolist() == [[False, False, False, True, True, True, False]]
    # unclosed → to the end
    assert answer_token_mask([["a", "\\boxed{", "7"]], span="boxed").tolist() == [[False, True, True]]
    assert not answer_token_mask([list("x=7")], span="boxed").any()


# --- answer_mask_from_ids with the character tokenizer ----------------------------------------

def test_answer_mask_from_ids_char_tokenizer():
    tok = build_char_tokenizer()
    texts = ["3+4=7;#7", "#1;#2", "77"]
    t = 10
    ids = torch.full((3, t), tok.pad_token_id, dtype=torch.long)
    att = torch.zeros(3, t, dtype=torch.bool)
    for i, s in enumerate(texts):
        enc = tok(s, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]  # right-padded, eos kept
        ids[i, :len(enc)] = torch.tensor(enc)
        att[i, :len(enc)] = True
    out = answer_mask_from_ids(tok, ids, att)
    # row 0: '#', '7', <eos> (positions 6, 7, 8); padding at 9 stays False
    assert out[0].tolist() == [False] * 6 + [True] * 3 + [False]
    # row 1: the last '#' (position 3), '2', <eos>
    assert out[1].tolist() == [False] * 3 + [True] * 3 + [False] * 4
    assert not out[2].any()  # no marker
    # a '#' hidden under padding (attention False) is ignored
    ids[2, 5] = tok.convert_tokens_to_ids("#")
    assert not answer_mask_from_ids(tok, ids, att)[2].any()
    # the mask feeds the weighting directly
    adv = torch.ones(3, t)
    zeroed = AnswerMask()(WeightingInputs(advantages=adv, mask=att, answer_mask=out)).advantages
    assert zeroed[0].tolist() == [1.0] * 6 + [0.0] * 3 + [1.0]


def test_answer_mask_from_ids_shape_checks():
    tok = build_char_tokenizer()
    with pytest.raises(BatchError):
        answer_mask_from_ids(tok, torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool))
