"""Generation engine: log-probs match a fresh forward, greedy is deterministic, eos ends a row,
seeds reproduce, filters keep the right tokens."""

import math

import pytest
import torch

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.ops import logprobs_from_logits
from rlvr.rollout import encode_prompts, generate, sequence_logprobs
from rlvr.rollout.sampling import filter_logp as _filter

ENGINES = ["loop", "hf"]
PROMPTS = ["347+285=", "9*3=", "12+7=", "1", "8765*4=", "3+3="]


@pytest.fixture(scope="module")
def small():
    # 16-token vocabulary: a fresh model is near uniform, so eos (1/16 per step) ends most rows early
    tok = build_char_tokenizer("0123456789+*=#;")
    return build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=1), tok


def forward_logprobs(model, gen, temperature=1.0):
    """Log-probs of the generated tokens from one forward pass over prompt + completion."""
    ids = torch.cat([gen.prompt_ids, gen.completion_ids], dim=1)
    mask = torch.cat([gen.prompt_mask, gen.completion_mask], dim=1).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
    p, t = gen.prompt_ids.shape[1], gen.completion_ids.shape[1]
    return logprobs_from_logits(logits[:, p - 1:p - 1 + t] / temperature, gen.completion_ids)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_fresh_forward(small, engine, temperature):
    model, tok = small
    gen = generate(model, tok, PROMPTS * 4, max_new_tokens=24, temperature=temperature, seed=0, engine=engine)
    ref = forward_logprobs(model, gen, temperature)
    m = gen.completion_mask
    assert m.any() and not m.all()  # some rows stopped at eos, some ran on: both paths are covered
    assert torch.allclose(gen.logprobs[m], ref[m], atol=1e-4)
    assert gen.logprobs.dtype == torch.float32 and bool((gen.logprobs[~m] == 0).all())


@pytest.mark.parametrize("engine", ENGINES)
def test_completion_mask_stops_at_first_eos(small, engine):
    model, tok = small
    gen = generate(model, tok, PROMPTS * 8, max_new_tokens=200, seed=3, engine=engine)
    eos, pad = tok.eos_token_id, tok.pad_token_id
    # with eos at ~1/16 per step every row ends well before 200 tokens: (15/16)^200 ≈ 2.5e-6 per row
    assert gen.completion_ids.shape[1] < 200
    for row, mask in zip(gen.completion_ids.tolist(), gen.completion_mask.tolist()):
        n = sum(mask)
        assert mask == [True] * n + [False] * (len(mask) - n)  # a prefix
        assert row[n - 1] == eos and eos not in row[:n - 1]  # the last trained token is the first eos
        assert row[n:] == [pad] * (len(row) - n)
    assert gen.lengths.tolist() == gen.completion_mask.sum(-1).tolist()


def test_texts_are_decoded_without_specials(small):
    model, tok = small
    gen = generate(model, tok, PROMPTS, max_new_tokens=16, seed=0)
    for text, ids, mask in zip(gen.texts, gen.completion_ids, gen.completion_mask):
        assert text == tok.decode(ids[mask], skip_special_tokens=True)
        assert "<eos>" not in text and "<pad>" not in text


def test_prompts_are_left_padded(small):
    model, tok = small
    gen = generate(model, tok, ["1", "123+4="], max_new_tokens=2, seed=0)
    assert gen.prompt_mask.tolist() == [[False] * 5 + [True] * 2, [True] * 7]
    assert gen.prompt_ids[0, -2:].tolist() == tok("1")["input_ids"]


@pytest.mark.parametrize("engine", ENGINES)
def test_greedy_is_deterministic_and_argmax(small, engine):
    model, tok = small
    a = generate(model, tok, PROMPTS, max_new_tokens=12, do_sample=False, engine=engine)
    b = generate(model, tok, PROMPTS, max_new_tokens=12, do_sample=False, seed=5, engine=engine)
    assert torch.equal(a.completion_ids, b.completion_ids)
    # every greedy token is the argmax of a fresh forward pass: its log-prob is the row maximum
    ids = torch.cat([a.prompt_ids, a.completion_ids], 1)
    mask = torch.cat([a.prompt_mask, a.completion_mask], 1).long()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    p, t = a.prompt_ids.shape[1], a.completion_ids.shape[1]
    argmax = logits[:, p - 1:p - 1 + t].argmax(-1)
    assert torch.equal(argmax[a.completion_mask], a.completion_ids[a.completion_mask])


def test_engines_agree_on_greedy(small):
    model, tok = small
    a = generate(model, tok, PROMPTS, max_new_tokens=12, do_sample=False, engine="loop")
    b = generate(model, tok, PROMPTS, max_new_tokens=12, do_sample=False, engine="hf")
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts
    assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5)


@pytest.mark.parametrize("engine", ENGINES)
def test_seeds_reproduce_and_leave_global_rng_alone(small, engine):
    model, tok = small
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    a = generate(model, tok, PROMPTS * 3, max_new_tokens=10, seed=11, engine=engine)
    assert torch.equal(torch.rand(3), expected)  # a seeded call does not consume the global RNG
    b = generate(model, tok, PROMPTS * 3, max_new_tokens=10, seed=11, engine=engine)
    c = generate(model, tok, PROMPTS * 3, max_new_tokens=10, seed=12, engine=engine)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.logprobs, b.logprobs)
    assert not torch.equal(a.completion_ids, c.completion_ids)


def test_top_k_one_is_greedy(small):
    model, tok = small
    greedy = generate(model, tok, PROMPTS, max_new_tokens=8, do_sample=False)
    topk = generate(model, tok, PROMPTS, max_new_tokens=8, top_k=1, seed=0)
    assert torch.equal(greedy.completion_ids, topk.completion_ids)


def test_filter_golden():
    logp = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    # top-p 0.6: mass before each token (sorted) is 0, 0.5, 0.8 → the third (0.8 >= 0.6) is dropped
    assert torch.isinf(_filter(logp, 0, 0.6)).tolist() == [[False, False, True]]
    # top-p 0.5: token 2 has 0.5 before it (>= 0.5) → only the first survives
    assert torch.isinf(_filter(logp, 0, 0.5)).tolist() == [[False, True, True]]
    assert torch.isinf(_filter(logp, 2, 1.0)).tolist() == [[False, False, True]]
    assert torch.equal(_filter(logp, 0, 1.0), logp)  # no filtering


def test_training_mode_is_restored_and_errors(small):
    model, tok = small
    model.train()
    generate(model, tok, PROMPTS[:2], max_new_tokens=2, seed=0)
    assert model.training
    model.eval()
    with pytest.raises(ValueError, match="engine"):
        generate(model, tok, PROMPTS, max_new_tokens=2, engine="no_such_engine")
    with pytest.raises(ValueError, match="temperature"):
        generate(model, tok, PROMPTS, max_new_tokens=2, temperature=0.0)
    with pytest.raises(ValueError, match="empty"):
        generate(model, tok, [], max_new_tokens=2)


def test_uniform_model_logprob_golden():
    # final norm weight 0 → hidden state 0 → all logits 0 → every token has log-prob −log V
    tok = build_char_tokenizer("01")
    model = build_tiny_model(tok, hidden=16, layers=1, heads=2)
    with torch.no_grad():
        model.model.norm.weight.zero_()
    gen = generate(model, tok, ["0", "01"], max_new_tokens=5, seed=0)
    expected = -math.log(len(tok))  # V = 4 specials + 2 = 6
    assert torch.allclose(gen.logprobs[gen.completion_mask], torch.tensor(expected), atol=1e-6)


def test_sequence_logprobs_matches_generation_and_keeps_grad(small):
    model, tok = small
    gen = generate(model, tok, PROMPTS * 2, max_new_tokens=16, temperature=0.8, seed=2)
    lp, ent = sequence_logprobs(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids,
                                gen.completion_mask, temperature=0.8, with_entropy=True)
    m = gen.completion_mask
    assert torch.allclose(lp[m], gen.logprobs[m], atol=1e-4)
    assert torch.allclose(lp[m], forward_logprobs(model, gen, 0.8)[m], atol=1e-5)
    assert lp.requires_grad and ent.shape == lp.shape
    assert bool((ent[m] > 0).all()) and bool((ent[m] <= math.log(len(tok)) + 1e-5).all())


def test_chat_prompts_that_carry_bos_are_not_given_a_second_one(small):
    _, tok = small
    ids, mask = encode_prompts(tok, ["<bos>12=", "<bos>3="])
    assert ids[0].tolist().count(tok.bos_token_id) == 1
    ids, _ = encode_prompts(tok, ["12=", "3="])
    assert ids[0, 0].item() == tok.bos_token_id
