"""The update's micro-batch plan: rows left out, rows sorted by length, padding trimmed (rlvr.batching)."""

from __future__ import annotations

import torch

from rlvr.batching import UpdatePlan, plan_micro_batches, row_lengths, trim_padding
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import sequence_logprobs
from rlvr.types import Problem, Rollouts


def _batch() -> Rollouts:
    """3 rows: prompts of 2, 3, 1 real tokens left-padded to 4; completions of 2, 1, 3 tokens padded to 5."""
    prompt_mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1], [0, 0, 0, 1]], dtype=torch.bool)
    completion_mask = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    gen = torch.Generator().manual_seed(0)
    return Rollouts(problems=[Problem(prompt=str(i)) for i in range(3)],
                    prompt_ids=torch.where(prompt_mask, torch.randint(5, 20, (3, 4), generator=gen), 0),
                    prompt_mask=prompt_mask, completion_ids=torch.randint(5, 20, (3, 5), generator=gen),
                    completion_mask=completion_mask, group_ids=torch.tensor([0, 0, 1]),
                    rewards=torch.tensor([[1.0], [0.0], [1.0]]), advantages=torch.randn(3, 5, generator=gen))


def test_row_lengths_count_real_prompt_tokens_and_the_completion_to_its_last_real_token():
    assert row_lengths(_batch()).tolist() == [2 + 2, 3 + 1, 1 + 3]


def test_trim_padding_cuts_shared_padding_only():
    batch = _batch()
    cut = trim_padding(batch)
    assert cut.prompt_ids.shape == (3, 3) and cut.completion_ids.shape == (3, 3)  # longest prompt 3, completion 3
    assert torch.equal(cut.prompt_ids, batch.prompt_ids[:, 1:]) and torch.equal(cut.advantages, batch.advantages[:, :3])
    assert torch.equal(cut.rewards, batch.rewards)  # (N, K) fields are not completion columns
    rows01 = trim_padding(batch.select(torch.tensor([0, 1])))
    assert rows01.prompt_ids.shape == (2, 3) and rows01.completion_ids.shape == (2, 2)
    assert trim_padding(rows01) is rows01  # nothing left to cut


def test_trimmed_log_probs_equal_the_padded_ones():
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=1).eval()
    batch = _batch()
    with torch.no_grad():
        full, _ = sequence_logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                    batch.completion_mask)
        for rows in (torch.tensor([0]), torch.tensor([1, 2]), torch.tensor([0, 1, 2])):
            part = trim_padding(batch.select(rows))
            cut, _ = sequence_logprobs(model, part.prompt_ids, part.prompt_mask, part.completion_ids,
                                       part.completion_mask)
            mask = part.completion_mask
            assert torch.allclose(cut[mask], full[rows][:, :cut.shape[1]][mask], atol=1e-6, rtol=0)


def test_plan_leaves_rows_out_sorts_by_length_and_keeps_one_row():
    rows = torch.arange(6)
    lengths = torch.tensor([3, 9, 4, 8, 1, 7])
    keep = torch.tensor([True, True, False, True, True, False])
    assert [m.tolist() for m in plan_micro_batches(rows, 2)] == [[0, 1], [2, 3], [4, 5]]  # knobs off: as before
    assert [m.tolist() for m in plan_micro_batches(rows, 2, keep=keep)] == [[0, 1], [3, 4]]
    assert [m.tolist() for m in plan_micro_batches(rows, 2, lengths=lengths)] == [[1, 3], [5, 2], [0, 4]]
    assert [m.tolist() for m in plan_micro_batches(rows, 0, lengths=lengths)] == [[0, 1, 2, 3, 4, 5]]  # one batch
    none = torch.zeros(6, dtype=torch.bool)
    assert [m.tolist() for m in plan_micro_batches(torch.tensor([1, 3, 5]), 2, keep=none, lengths=lengths)] == [[5]]
    assert [m.tolist() for m in plan_micro_batches(torch.tensor([1, 3]), 2, keep=none)] == [[1]]


def test_plan_metrics_count_rows_positions_and_padding():
    batch = _batch()
    plan = UpdatePlan(2, keep=torch.tensor([True, False, True]), lengths=row_lengths(batch))
    for rows in plan.micro_batches(torch.arange(3)):
        plan.count(plan.view(batch, rows))
    # rows 0 and 2 in one micro-batch: prompt width 2 (row 0's), completion width 3 (row 2's)
    assert plan.metrics(3) == {"update/skipped_row_frac": 1 - 2 / 3, "update/padding_frac": 1 - 8 / 10,
                               "update/tokens": 10.0}


def test_length_buckets_split_one_micro_batch_longest_first_into_buckets_of_at_least_8_rows():
    lengths = torch.tensor([5, 30, 12, 7, 40, 9, 22, 3, 18, 25, 11, 6, 33, 8, 14, 2, 28, 16])  # (18,)
    rows = torch.arange(18)
    order = torch.sort(lengths, descending=True, stable=True).indices
    two = plan_micro_batches(rows, 0, lengths=lengths, buckets=3)  # 18 // 8 = 2 buckets at most
    assert [b.tolist() for b in two] == [order[:9].tolist(), order[9:].tolist()]
    assert lengths[two[0]].min() >= lengths[two[1]].max()
    assert [b.tolist() for b in plan_micro_batches(rows, 0, lengths=lengths, buckets=1)] == [rows.tolist()]
    assert [b.tolist() for b in plan_micro_batches(rows[:15], 0, lengths=lengths, buckets=3)] == [list(range(15))]
    sized = plan_micro_batches(rows, 6, lengths=lengths, buckets=3)  # micro_batch_size set: buckets unused
    assert [b.tolist() for b in sized] == [order[i:i + 6].tolist() for i in (0, 6, 12)]
    kept = plan_micro_batches(rows, 0, keep=lengths > 10, lengths=lengths, buckets=3)  # 10 kept rows: 1 bucket
    assert len(kept) == 1 and sorted(kept[0].tolist()) == (lengths > 10).nonzero().squeeze(-1).tolist()
