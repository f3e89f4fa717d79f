"""rlvr.rollout.scoring.packed_logprobs: one padding-free forward gives the padded pass's log-probs,
entropies and gradients, and its attention really is block-diagonal (a row never sees another)."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.packing import pack_rows
from rlvr.rollout.scoring import packed_logprobs, packing_unsupported, sequence_logprobs
from tests.helpers.tolerance import sum_rtol

# Packing changes only the order of float32 sums (matmul tiles over L, the softmax over a row's keys
# inside an L-wide masked row): a log-prob is a chain of sums of at most ~1k terms (hidden 32, MLP 128,
# vocabulary ~100, keys <= 12), so two orders differ by at most sum_rtol(1024) ≈ 6e-5 of the largest
# magnitude involved; a real leak across rows or a position off by one moves log-probs by > 1e-2.
RTOL = sum_rtol(1024)


def _rows(vocab: int):
    """Three rows: left-padded prompts of 3, 5 and 2 real tokens, completions of 4, 6 and 1 real tokens."""
    gen = torch.Generator().manual_seed(7)
    prompt_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 1, 1]]).bool()
    attention = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]]).bool()
    prompt_ids = torch.randint(4, vocab, prompt_mask.shape, generator=gen) * prompt_mask
    completion_ids = torch.randint(4, vocab, attention.shape, generator=gen) * attention
    return prompt_ids, prompt_mask, completion_ids, attention


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    scale = max(a.abs().max().item(), b.abs().max().item(), 1.0)
    assert (a - b).abs().max().item() <= RTOL * scale, (a - b).abs().max().item()


def check_packed_equals_padded(policy: torch.nn.Module, packed_model: torch.nn.Module) -> None:
    """Packed log-probs and entropies of ``_rows`` under ``packed_model`` equal ``policy``'s padded
    pass and each row scored alone; 0 past a row's last real token."""
    args = _rows(policy.config.vocab_size)
    mask = args[3]
    with torch.no_grad():
        padded, padded_ent = sequence_logprobs(policy, *args, with_entropy=True)
        packed, packed_ent = packed_logprobs(packed_model, *args, with_entropy=True)
        for i in range(3):  # each row alone, cut to its own real tokens
            p0, t1 = int((~args[1][i]).sum()), int(mask[i].sum())
            alone, _ = sequence_logprobs(policy, args[0][i:i + 1, p0:], args[1][i:i + 1, p0:],
                                         args[2][i:i + 1, :t1], mask[i:i + 1, :t1])
            _close(packed[i, :t1], alone[0])
    _close(packed[mask], padded[mask])
    _close(packed_ent[mask], padded_ent[mask])
    assert (packed[~mask] == 0).all()  # past a row's last real token: padding, left at 0


def test_packed_logprobs_and_entropy_equal_the_padded_pass_and_one_row_at_a_time(policy):
    check_packed_equals_padded(policy, policy)


def test_a_row_never_sees_the_row_packed_before_it(policy):
    """Row 2 comes after row 1 in the pack: with plain causal attention it would see row 1's tokens.
    Changing row 1 leaves row 2 as it was; the same pack under a full attention mask (no packed-row
    detection: plain causal) does move row 2, so the check can fail."""
    prompt_ids, prompt_mask, completion_ids, attention = _rows(policy.config.vocab_size)
    other = completion_ids.clone()
    other[1] = (other[1] + 1) % policy.config.vocab_size * attention[1]
    with torch.no_grad():
        before, _ = packed_logprobs(policy, prompt_ids, prompt_mask, completion_ids, attention)
        after, _ = packed_logprobs(policy, prompt_ids, prompt_mask, other, attention)
    _close(after[2], before[2])
    _close(after[0], before[0])
    assert (after[1] - before[1]).abs().max() > 1e-3  # row 1 itself did change

    def causal_only(ids):
        packed = pack_rows(prompt_ids, prompt_mask, ids, attention)
        logits = policy(input_ids=packed.input_ids, position_ids=packed.position_ids,
                        attention_mask=torch.ones_like(packed.input_ids), logits_to_keep=packed.predict,
                        use_cache=False).logits
        return packed.unpack(torch.log_softmax(logits[0].float(), -1).gather(-1, packed.targets[:, None])[:, 0])
    with torch.no_grad():
        leak = (causal_only(other)[2] - causal_only(completion_ids)[2]).abs().max().item()
    assert leak > 1e-3


def gradient_gap(padded_model: torch.nn.Module, packed_model: torch.nn.Module) -> float:
    """|g_padded - g_packed| / |g_padded| of a weighted sum of log-probs and entropies over ``_rows``,
    the padded pass on a copy of ``padded_model``, the packed one on a copy of ``packed_model``."""
    args = _rows(padded_model.config.vocab_size)
    weights = torch.linspace(-1.0, 1.0, args[3].numel()).view(args[3].shape) * args[3]
    grads = []
    for fn, base in ((sequence_logprobs, padded_model), (packed_logprobs, packed_model)):
        model = copy.deepcopy(base).train()
        logp, ent = fn(model, *args, with_entropy=True, entropy_grad=True)
        ((logp + 0.1 * ent) * weights).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    return ((grads[0] - grads[1]).norm() / grads[0].norm()).item()


def test_packed_gradients_equal_the_padded_pass(policy):
    gap = gradient_gap(policy, policy)
    assert gap <= RTOL, gap


def test_which_models_take_packed_rows(policy):
    assert packing_unsupported(policy) is None

    class Wrapper(torch.nn.Module):  # as DDP: the model under .module
        def __init__(self, module):
            super().__init__()
            self.module = module
    assert packing_unsupported(Wrapper(policy)) is None
    other = copy.deepcopy(policy)
    other.config._attn_implementation = "flex_attention"
    assert "flex_attention" in packing_unsupported(other)
    assert "'None'" in packing_unsupported(torch.nn.Linear(2, 2))  # no transformers config at all


def test_a_model_without_transformers_masks_is_refused():
    class Plain(torch.nn.Module):
        class config:  # noqa: N801 — a config-like attribute
            _attn_implementation = "sdpa"

        def forward(self, input_ids):
            return input_ids
    assert "does not build its masks with transformers.masking_utils" in packing_unsupported(Plain())


def test_a_lora_reference_is_looked_through(policy):
    pytest.importorskip("peft")
    from rlvr.models.lora import AdapterDisabled, add_lora
    from rlvr.models.lora_spec import LoraSpec
    lora = add_lora(copy.deepcopy(policy), LoraSpec(r=2, alpha=4))
    assert packing_unsupported(lora) is None and packing_unsupported(AdapterDisabled(lora)) is None


def test_eager_attention_packs_block_diagonally_too(policy):
    eager = copy.deepcopy(policy)
    eager.config._attn_implementation = "eager"
    prompt_ids, prompt_mask, completion_ids, attention = _rows(policy.config.vocab_size)
    other = completion_ids.clone()
    other[1] = (other[1] + 1) % policy.config.vocab_size * attention[1]
    with torch.no_grad():
        padded, _ = sequence_logprobs(eager, prompt_ids, prompt_mask, completion_ids, attention)
        packed, _ = packed_logprobs(eager, prompt_ids, prompt_mask, completion_ids, attention)
        changed, _ = packed_logprobs(eager, prompt_ids, prompt_mask, other, attention)
    _close(packed[attention], padded[attention])
    _close(changed[2], packed[2])
