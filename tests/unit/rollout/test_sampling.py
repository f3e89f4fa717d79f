"""Sampling knobs: min-p and repetition penalty (golden values, HF equivalence), the log-prob
convention under them, and micro-batched generation."""

import math

import pytest
import torch
from transformers.generation.logits_process import MinPLogitsWarper, RepetitionPenaltyLogitsProcessor

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import generate
from rlvr.rollout.sampling import Sampler, filter_logp, repetition_penalty, seen_tokens

PROMPTS = ["347+285=", "9*3=", "12+7=", "1", "8765*4=", "3+3=", "55*5=", "0"]


@pytest.fixture(scope="module")
def small():
    tok = build_char_tokenizer("0123456789+*=#;")
    return build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=1), tok


# --- golden values on small logits ---------------------------------------------------------------

def test_min_p_golden():
    logp = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    # min_p 0.2: threshold 0.2 * 0.5 = 0.1, so only 0.05 goes; min_p 0.5: threshold 0.25 keeps 0.5 and 0.3
    assert torch.isinf(filter_logp(logp, 0, 1.0, 0.2)).tolist() == [[False, False, False, True]]
    assert torch.isinf(filter_logp(logp, 0, 1.0, 0.5)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logp(logp, 0, 1.0, 1.0)).tolist() == [[False, True, True, True]]  # the top stays
    assert torch.equal(filter_logp(logp, 0, 1.0, 0.0), logp)  # off


def test_repetition_penalty_golden():
    logits = torch.tensor([[2.0, -1.0, 0.5, -0.5]])
    seen = torch.tensor([[True, True, False, False]])
    # seen: positive logits divided by 2, negative multiplied by 2; unseen unchanged
    assert repetition_penalty(logits, seen, 2.0).tolist() == [[1.0, -2.0, 0.5, -0.5]]
    assert torch.equal(repetition_penalty(logits, seen, 1.0), logits)


def test_seen_tokens_ignores_padding():
    ids = torch.tensor([[0, 0, 3, 1], [2, 2, 2, 2]])
    mask = torch.tensor([[False, False, True, True], [True, True, True, True]])
    assert seen_tokens(ids, mask, 5).tolist() == [[False, True, False, True, False],
                                                  [False, False, True, False, False]]


def test_min_p_and_penalty_match_hugging_face():
    torch.manual_seed(0)
    logits = torch.randn(6, 50) * 3  # (B, V)
    ids = torch.randint(0, 50, (6, 7))  # (B, L) tokens seen so far
    hf = RepetitionPenaltyLogitsProcessor(1.3)(ids, logits.clone())
    ours = repetition_penalty(logits, seen_tokens(ids, torch.ones_like(ids, dtype=torch.bool), 50), 1.3)
    assert torch.allclose(ours, hf)
    scaled = logits / 0.7
    hf_kept = torch.isfinite(MinPLogitsWarper(0.1)(ids, scaled.clone()))
    assert torch.equal(torch.isfinite(filter_logp(scaled.log_softmax(-1), 0, 1.0, 0.1)), hf_kept)


def test_penalty_changes_the_draw_not_the_reported_logprob():
    logits = torch.tensor([[2.0, 1.5, -3.0]])
    seen = torch.tensor([[True, False, False]])
    greedy = Sampler(1.0, 1.0, 0, False, None, torch.device("cpu"), repetition_penalty=2.0)
    token, lp = greedy(logits, seen)
    assert token.tolist() == [1]  # 2.0 / 2 = 1.0 < 1.5: the penalised argmax
    assert lp.item() == pytest.approx(torch.log_softmax(logits, -1)[0, 1].item())  # raw logits, not penalised
    with pytest.raises(ValueError, match="needs the tokens each row has seen"):
        greedy(logits)


def test_min_p_sampling_never_draws_a_dropped_token():
    logits = torch.tensor([[3.0, 2.5, 0.0, -1.0]]).expand(4000, 4)  # probs ≈ .60 .37 .03 .01
    sampler = Sampler(1.0, 1.0, 0, True, 0, torch.device("cpu"), min_p=0.1)
    token, lp = sampler(logits)
    counts = torch.bincount(token, minlength=4).tolist()
    assert counts[2] == counts[3] == 0 and min(counts[:2]) > 1000
    assert torch.allclose(lp, torch.log_softmax(logits, -1).gather(-1, token.unsqueeze(-1)).squeeze(-1))


def test_loop_and_hf_agree_greedily_under_repetition_penalty(small):
    model, tok = small
    prompts = ["12+7=", "9*3=9", "3+3=6"]  # equal lengths: no left padding for HF to penalise
    kw = dict(max_new_tokens=10, do_sample=False, repetition_penalty=1.5)
    loop = generate(model, tok, prompts, engine="loop", **kw)
    hf = generate(model, tok, prompts, engine="hf", **kw)
    plain = generate(model, tok, prompts, max_new_tokens=10, do_sample=False)
    assert torch.equal(loop.completion_ids, hf.completion_ids)
    assert not torch.equal(loop.completion_ids, plain.completion_ids)  # the penalty did something
    assert torch.allclose(loop.logprobs, hf.logprobs, atol=1e-5)


# --- micro-batched generation ----------------------------------------------------------------------

@pytest.mark.parametrize("engine", ["loop", "hf"])
def test_greedy_micro_batches_equal_the_whole_batch(engine):
    tok = build_char_tokenizer("0123")
    model = build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=1)
    prompts = ["0", "0123", "1", "12", "3", "013", "2", "0"]
    # a strong penalty makes greedy rows end (eos is unseen) after 1 to 12 tokens, so chunks differ in T
    kw = dict(max_new_tokens=12, do_sample=False, engine=engine, keep_hidden=True, repetition_penalty=50.0)
    whole = generate(model, tok, prompts, **kw)
    chunked = generate(model, tok, prompts, micro_batch_size=3, **kw)  # chunks of 3, 3, 2 rows
    assert whole.lengths.tolist() == [1, 12, 2, 1, 6, 7, 12, 1]  # the middle chunk is padded from 7 to 12
    assert torch.equal(chunked.completion_ids, whole.completion_ids)
    assert torch.equal(chunked.completion_mask, whole.completion_mask)
    assert torch.allclose(chunked.logprobs, whole.logprobs, atol=1e-5)
    assert torch.allclose(chunked.hidden, whole.hidden, atol=1e-5)
    assert chunked.texts == whole.texts


def test_sampled_micro_batches_are_reproducible(small):
    model, tok = small
    kw = dict(max_new_tokens=12, temperature=0.9, seed=4)
    a = generate(model, tok, PROMPTS, micro_batch_size=3, **kw)
    b = generate(model, tok, PROMPTS, micro_batch_size=3, **kw)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.logprobs, b.logprobs)
    whole = generate(model, tok, PROMPTS, **kw)
    assert torch.equal(generate(model, tok, PROMPTS, micro_batch_size=len(PROMPTS), **kw).completion_ids,
                       whole.completion_ids)  # one chunk is the unchunked call


def test_hf_micro_batches_get_their_own_seeds(small):
    model, tok = small
    gen = generate(model, tok, ["1"] * 8, max_new_tokens=12, seed=3, engine="hf", micro_batch_size=4)
    assert not torch.equal(gen.completion_ids[:4], gen.completion_ids[4:])  # not the same draws twice


def test_sampling_settings_out_of_range(small):
    model, tok = small
    for kw, what in [({"min_p": 1.5}, "min_p"), ({"repetition_penalty": 0.0}, "repetition_penalty"),
                     ({"micro_batch_size": -1}, "micro_batch_size"), ({"top_p": 0.0}, "top_p")]:
        with pytest.raises(ValueError, match=what):
            generate(model, tok, ["1"], max_new_tokens=2, **kw)
    assert math.isfinite(generate(model, tok, ["1"], max_new_tokens=2, min_p=1.0).logprobs.sum().item())


def test_sampling_knobs_out_of_range_are_config_errors(tmp_path):
    from rlvr.train.config import ConfigError
    from tests.helpers.tiny import tiny_config
    for override, message in [("rollout.min_p=1.5", r"rollout.min_p must be in \[0, 1\], got 1.5"),
                              ("rollout.repetition_penalty=0", "rollout.repetition_penalty must be > 0"),
                              ("rollout.micro_batch_size=-2", "rollout.micro_batch_size must be >= 0"),
                              ("run.table_every=-1", "run.table_every must be >= 0")]:
        with pytest.raises(ConfigError, match=message):
            tiny_config(str(tmp_path), [override])
    cfg = tiny_config(str(tmp_path), ["rollout.min_p=0.05", "rollout.repetition_penalty=1.1",
                                      "rollout.micro_batch_size=8"])
    assert (cfg.rollout.min_p, cfg.rollout.repetition_penalty, cfg.rollout.micro_batch_size) == (0.05, 1.1, 8)
