"""rlvr.packing: the packed layout of a hand-made micro-batch (golden), what cannot be packed, and the
two token-budget plans (packed: summed lengths; padded: rows × the longest)."""

from __future__ import annotations

import pytest
import torch

from rlvr.batching import UpdatePlan, plan_padded_budget
from rlvr.packing import pack_rows, packed_lengths, packing_problem, plan_token_budget
from rlvr.types import BatchError

F, T_ = False, True


def _batch():
    """Two rows: a left-padded prompt of 2 real tokens with a 2-token completion, and a full
    3-token prompt with a 1-token completion; completions right-padded to width 3."""
    prompt_ids = torch.tensor([[0, 5, 6], [7, 8, 9]])
    prompt_mask = torch.tensor([[F, T_, T_], [T_, T_, T_]])
    completion_ids = torch.tensor([[10, 11, 0], [12, 0, 0]])
    attention = torch.tensor([[T_, T_, F], [T_, F, F]])
    return prompt_ids, prompt_mask, completion_ids, attention


def test_the_packed_layout_of_a_hand_made_batch():
    packed = pack_rows(*_batch())
    assert packed.input_ids.tolist() == [[5, 6, 10, 11, 7, 8, 9, 12]]  # real tokens only, row after row
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3]]  # restarting at each row
    # token 10 is predicted at packed index 1 (token 6), 11 at 2 (token 10), 12 at 6 (token 9)
    assert packed.predict.tolist() == [1, 2, 6]
    assert (packed.rows.tolist(), packed.cols.tolist(), packed.targets.tolist()) == ([0, 0, 1], [0, 1, 0],
                                                                                      [10, 11, 12])
    assert packed.unpack(torch.tensor([-1.0, -2.0, -3.0])).tolist() == [[-1.0, -2.0, 0.0], [-3.0, 0.0, 0.0]]
    assert packed_lengths(_batch()[1], _batch()[3]).tolist() == [4, 4]


def test_a_row_without_a_real_completion_token_keeps_one_column():
    prompt_ids, prompt_mask, completion_ids, attention = _batch()
    attention[1] = False  # as trim_padding, at least one completion column
    packed = pack_rows(prompt_ids, prompt_mask, completion_ids, attention)
    assert packed.input_ids.tolist() == [[5, 6, 10, 11, 7, 8, 9, 12]] and packed.predict.tolist() == [1, 2, 6]
    assert packed_lengths(prompt_mask, attention).tolist() == [4, 4]


def test_unpack_keeps_the_gradient():
    packed = pack_rows(*_batch())
    values = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (packed.unpack(values) * torch.tensor([[1.0, 10.0, 100.0], [1000.0, 0.0, 0.0]])).sum().backward()
    assert values.grad.tolist() == [1.0, 10.0, 1000.0]


@pytest.mark.parametrize("change,words", [
    (lambda pm, att, cm: pm.__setitem__((0, slice(None)), False), "no real prompt token"),
    (lambda pm, att, cm: pm.__setitem__((0, 2), False), "not left-padded"),
    (lambda pm, att, cm: (att.__setitem__((0, 0), False), cm.__setitem__((0, 0), False)),
     "padding token before a real one"),
    (lambda pm, att, cm: cm.__setitem__((1, 2), True), "not a real token"),
])
def test_rows_that_cannot_be_packed_exactly_are_named(change, words):
    _, prompt_mask, _, attention = _batch()
    completion_mask = attention.clone()
    assert packing_problem(prompt_mask, attention, completion_mask) is None
    change(prompt_mask, attention, completion_mask)
    assert words in packing_problem(prompt_mask, attention, completion_mask)


def test_the_token_budget_packs_longest_first_into_the_first_micro_batch_with_room():
    lengths = torch.tensor([5, 9, 3, 6, 2, 4])
    plan = plan_token_budget(torch.arange(6), lengths, budget=10)
    # sorted 9, 6, 5, 4, 3, 2: [9], [6, 4], [5, 3, 2] (first fit)
    assert [p.tolist() for p in plan] == [[1], [3, 5], [0, 2, 4]]
    assert all(int(lengths[p].sum()) <= 10 for p in plan)
    assert sorted(torch.cat(plan).tolist()) == list(range(6))


def test_a_row_longer_than_the_budget_gets_its_own_micro_batch_with_one_notice(capsys):
    lengths = torch.tensor([30, 4, 4, 25])
    plan = plan_token_budget(torch.arange(4), lengths, budget=17)
    assert [p.tolist() for p in plan] == [[0], [3], [1, 2]]
    assert "2 row(s) are longer than the token budget of 17" in capsys.readouterr().err
    plan_token_budget(torch.arange(4), lengths, budget=17)
    assert capsys.readouterr().err == ""  # once per budget and process
    with pytest.raises(BatchError, match="must be positive"):
        plan_token_budget(torch.arange(4), lengths, budget=0)


def test_the_padded_budget_counts_rows_times_the_longest():
    lengths = torch.tensor([5, 9, 3, 6, 2, 4])
    plan = plan_padded_budget(torch.arange(6), lengths, budget=12)
    # sorted 9, 6, 5, 4, 3, 2: [9] (1 x 9), [6, 5] (2 x 6), [4, 3, 2] (3 x 4)
    assert [p.tolist() for p in plan] == [[1], [3, 0], [5, 2, 4]]


def test_a_plan_with_a_budget_keeps_the_skip_and_needs_lengths():
    lengths = torch.tensor([5, 9, 3, 6])
    keep = torch.tensor([True, False, True, True])
    plan = UpdatePlan(0, keep, lengths, budget=10, packed=True)
    assert [p.tolist() for p in plan.micro_batches(torch.arange(4))] == [[3, 2], [0]]
    with pytest.raises(BatchError, match="lengths"):
        UpdatePlan(0, None, None, budget=10)
