"""algorithm.mask_truncated_completions (rlvr.train.truncation): golden values on 4-row batches."""

from __future__ import annotations

import torch

from rlvr.aggregation import aggregate
from rlvr.train.truncation import eos_token_ids, mask_truncated, truncated_rows
from rlvr.types import Rollouts

EOS = 2
# Rows (real tokens): [5, eos] ended; [5, 6, 7] hit the cap T=3; [eos] ended at once; [5, 6, eos]
# ended exactly at the cap (an eos in the last slot is not a truncation).
IDS = torch.tensor([[5, EOS, 0], [5, 6, 7], [EOS, 0, 0], [5, 6, EOS]])  # (N=4, T=3)
ATTN = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]], dtype=torch.bool)  # (4, 3)


def _batch() -> Rollouts:
    return Rollouts(problems=[None] * 4, prompt_ids=torch.zeros(4, 1, dtype=torch.long),
                    prompt_mask=torch.ones(4, 1, dtype=torch.bool), completion_ids=IDS.clone(),
                    completion_mask=ATTN.clone(), group_ids=torch.tensor([0, 0, 1, 1]))


def test_truncated_rows_golden():
    assert truncated_rows(IDS, ATTN, torch.tensor([EOS])).tolist() == [False, True, False, False]
    # A second eos id (e.g. <|im_end|> beside <eos>) ends a row too: 7 as an eos makes row 1 ended.
    assert truncated_rows(IDS, ATTN, torch.tensor([EOS, 7])).tolist() == [False, False, False, False]


def test_mask_truncated_clears_the_loss_mask_and_keeps_attention():
    batch = _batch()
    frac = mask_truncated(batch, torch.tensor([EOS]))
    assert frac == 0.25
    assert batch.completion_mask.tolist() == [[True, True, False], [False] * 3, [True, False, False], [True] * 3]
    assert torch.equal(batch.attention, ATTN)  # the forward pass still sees row 1's tokens


def test_masked_rows_are_absent_from_the_global_normalisers():
    # Token-mean: 9 real tokens; with row 1 masked the normaliser is 6 and row 1 gets no gradient.
    batch = _batch()
    mask_truncated(batch, torch.tensor([EOS]))
    logp = torch.zeros(4, 3, requires_grad=True)
    loss = aggregate(-logp, batch.completion_mask, "token-mean", num_tokens=batch.completion_mask.sum())
    loss.backward()
    expected = -batch.completion_mask.float() / 6.0  # d(-Σ logp / 6)/d logp on kept tokens
    assert torch.equal(logp.grad, expected)
    # seq-mean-token-mean: 3 sequences remain (num_seqs counts rows with a trained token).
    logp.grad = None
    num_seqs = (batch.completion_mask.sum(-1) > 0).sum()
    aggregate(-logp, batch.completion_mask, "seq-mean-token-mean", num_seqs=num_seqs).backward()
    assert num_seqs.item() == 3
    assert torch.allclose(logp.grad[0], torch.tensor([-1 / 6, -1 / 6, 0.0]))  # 1/(3 seqs · 2 tokens)
    assert torch.equal(logp.grad[1], torch.zeros(3))


def test_eos_ids_from_generation_config_then_tokenizer():
    class Obj:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    tok = Obj(eos_token_id=3)
    assert eos_token_ids(Obj(generation_config=Obj(eos_token_id=[4, 5])), tok).tolist() == [4, 5]
    assert eos_token_ids(Obj(generation_config=Obj(eos_token_id=None)), tok).tolist() == [3]
