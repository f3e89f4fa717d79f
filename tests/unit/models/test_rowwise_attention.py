"""Row-wise sdpa (rlvr.models.rowwise_attention): a packed pass gives the padded pass's log-probs and
gradients, a row never sees another, grouped-query heads are served, and every call that is not a
packed pass (padded scoring, generation) is transformers' sdpa exactly."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlvr.models.rowwise_attention import ROWWISE_SDPA, RowLayout, row_index
from rlvr.packing import pack_rows
from rlvr.rollout.scoring import packed_logprobs, packing_unsupported, sequence_logprobs
from tests.helpers.tolerance import sum_rtol
from tests.unit.rollout.test_packed_scoring import _rows, check_packed_equals_padded, gradient_gap

# As tests/unit/rollout/test_packed_scoring.py: packing changes only the order of float32 sums (matmul
# tiles over L, each row's softmax over its own W keys instead of a masked wider row); a log-prob is a
# chain of at most ~1k-term sums, so the orders differ by <= sum_rtol(1024) of the largest magnitude;
# a leak across rows or a position off by one moves log-probs by > 1e-2.
RTOL = sum_rtol(1024)


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    scale = max(a.abs().max().item(), b.abs().max().item(), 1.0)
    assert (a - b).abs().max().item() <= RTOL * scale, (a - b).abs().max().item()


def _rowwise(model: torch.nn.Module) -> torch.nn.Module:
    out = copy.deepcopy(model)
    out.set_attn_implementation(ROWWISE_SDPA)
    return out


def test_row_index_golden():
    pos = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]])
    want = torch.tensor([[0, 1, 2, -1], [3, 4, -1, -1], [5, 6, 7, 8]])
    got = row_index(pos)
    assert got.shape == (1, 1, 3, 4) and got.dtype == torch.int64
    assert torch.equal(got[0, 0], want)
    with pytest.raises(ValueError, match="must start at 0"):
        row_index(torch.tensor([[1, 2, 0, 1]]))


def test_packed_rowwise_equals_the_padded_pass_and_each_row_alone(policy):
    model = _rowwise(policy)
    assert packing_unsupported(model) is None
    check_packed_equals_padded(policy, model)


def test_a_row_never_sees_another_and_the_check_can_fail(policy):
    """Changing row 1 leaves rows 0 and 2 as they were. The same pack under a row index that makes it
    one long row (plain causal attention) moves row 2: the check sees a leak when there is one."""
    prompt_ids, prompt_mask, completion_ids, attention = _rows(policy.config.vocab_size)
    other = completion_ids.clone()
    other[1] = (other[1] + 1) % policy.config.vocab_size * attention[1]
    model = _rowwise(policy)
    with torch.no_grad():
        before, _ = packed_logprobs(model, prompt_ids, prompt_mask, completion_ids, attention)
        after, _ = packed_logprobs(model, prompt_ids, prompt_mask, other, attention)
    _close(after[0], before[0])
    _close(after[2], before[2])
    assert (after[1] - before[1]).abs().max() > 1e-3

    def one_row(ids):  # the pack's rows index as if it were a single row
        packed = pack_rows(prompt_ids, prompt_mask, ids, attention)
        merged = row_index(torch.arange(packed.input_ids.shape[1])[None])
        logits = model(input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=merged,
                       logits_to_keep=packed.predict, use_cache=False).logits
        return packed.unpack(torch.log_softmax(logits[0].float(), -1).gather(-1, packed.targets[:, None])[:, 0])
    with torch.no_grad():
        assert (one_row(other)[2] - one_row(completion_ids)[2]).abs().max().item() > 1e-3


def test_packed_rowwise_gradients_equal_the_padded_pass(policy):
    gap = gradient_gap(policy, _rowwise(policy))
    assert gap <= RTOL, gap


def test_grouped_query_heads_pack_row_wise(tok):
    """A Qwen2 model with 4 query heads sharing 2 key/value heads (biases on q, k, v)."""
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         attn_implementation="sdpa")
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    args = _rows(config.vocab_size)
    with torch.no_grad():
        padded, _ = sequence_logprobs(model, *args)
        packed, _ = packed_logprobs(_rowwise(model), *args)
    _close(packed[args[3]], padded[args[3]])


def test_every_other_call_is_transformers_sdpa(policy, tok):
    """Padded scoring and generation with the KV cache go through sdpa's own function on the same
    inputs: bit for bit the same result in one process."""
    args = _rows(policy.config.vocab_size)
    model = _rowwise(policy)
    with torch.no_grad():
        assert torch.equal(sequence_logprobs(model, *args)[0], sequence_logprobs(policy, *args)[0])
        prompt = args[0][:, -3:]
        kw = {"max_new_tokens": 5, "do_sample": False, "pad_token_id": tok.pad_token_id}
        assert torch.equal(model.generate(prompt, **kw), policy.generate(prompt, **kw))


def test_sliding_windows_keep_transformers_sdpa_and_a_forced_pack_is_refused(tok):
    """Row-wise sdpa computes plain causal attention per row: a sliding-window model keeps sdpa under
    optim.packing=auto, and a packed pass forced through row-wise sdpa stops with the reason."""
    from rlvr.models.rowwise_attention import rowwise_refusal
    from rlvr.train.config import load_config
    from rlvr.train.precision import attention_kernel
    sizes = {"vocab_size": len(tok), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
             "attn_implementation": "sdpa"}
    config = Qwen2Config(**sizes, use_sliding_window=True, sliding_window=4, max_window_layers=0)
    model = Qwen2ForCausalLM(config).eval()
    assert rowwise_refusal(model) == "sliding-window attention"
    assert attention_kernel(model, load_config(None, [])) == "sdpa"
    full = Qwen2ForCausalLM(Qwen2Config(**sizes)).eval()
    assert rowwise_refusal(full) is None
    assert attention_kernel(full, load_config(None, [])) == ROWWISE_SDPA
    assert attention_kernel(full, load_config(None, ["optim.packing=never"])) == "sdpa"
    with torch.no_grad(), pytest.raises(NotImplementedError, match="sliding_window"):
        packed_logprobs(_rowwise(model), *_rows(config.vocab_size))


def test_row_layout_buckets_golden():
    """Rows of 3, 70, 30 and 40 tokens: sorted longest first, a new bucket at a row at most half as
    long as its bucket's first while that is >= 64 (70 -> 30 splits; 40 is more than half of 70; 3 joins
    the 30-bucket, whose first is < 64). The inverse maps every packed token to its slot."""
    sizes = [3, 70, 30, 40]
    pos = torch.cat([torch.arange(n) for n in sizes])[None]
    index = row_index(pos)[0, 0]
    layout = RowLayout.of(index)
    assert layout.shapes == ((2, 70), (2, 30))
    slots = torch.cat([t.view(-1) for t in layout.takes])  # packed index read by each slot
    assert torch.equal(slots[layout.inverse], torch.arange(sum(sizes)))  # each token reads itself back
    starts = [0, 3, 73, 103]
    assert torch.equal(layout.takes[0].view(2, 70)[:, 0], torch.tensor([starts[1], starts[3]]))
    assert torch.equal(layout.takes[1].view(2, 30)[:, 0], torch.tensor([starts[2], starts[0]]))


def test_length_buckets_give_the_padded_pass(policy):
    """Rows long and uneven enough for two buckets (82, 33 and 5 packed tokens): the log-probs of the
    padded pass (tolerance as above: sums of at most a few hundred terms)."""
    gen = torch.Generator().manual_seed(3)
    lengths = torch.tensor([80, 30, 4])
    attention = torch.arange(80)[None] < lengths[:, None]  # (3, 80)
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1]]).bool()
    vocab = policy.config.vocab_size
    args = (torch.randint(4, vocab, (3, 3), generator=gen) * prompt_mask, prompt_mask,
            torch.randint(4, vocab, (3, 80), generator=gen) * attention, attention)
    index = row_index(pack_rows(*args).position_ids)[0, 0]
    assert len(RowLayout.of(index).shapes) == 2  # 82 | 33, 5: two buckets
    with torch.no_grad():
        padded, _ = sequence_logprobs(policy, *args)
        packed, _ = packed_logprobs(_rowwise(policy), *args)
    _close(packed[attention], padded[attention])


def test_a_transformers_that_refuses_the_implementation_keeps_sdpa(monkeypatch):
    """Where set_attn_implementation rejects the registered name (an older transformers), the policy
    keeps transformers' sdpa and auto then runs padded passes, instead of the run failing."""
    from rlvr.models import build_char_tokenizer, build_tiny_model
    from rlvr.train.config import load_config
    from rlvr.train.precision import configure_policy
    model = build_tiny_model(build_char_tokenizer(), hidden=32, layers=1, heads=2)
    real = type(model).set_attn_implementation

    def picky(self, name):
        if name == ROWWISE_SDPA:
            raise ValueError(f"unknown attention implementation {name}")
        return real(self, name)
    monkeypatch.setattr(type(model), "set_attn_implementation", picky)
    model.config._attn_implementation = "eager"  # so that configure_policy has to set it
    configure_policy(model, load_config(None, []))
    assert model.config._attn_implementation == "sdpa"
